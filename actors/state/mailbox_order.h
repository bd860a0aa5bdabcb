// MailboxOrder and ActorTurn: the ordering CAF gives, made visible to ThreadSanitizer.
//
// A message's fields are written by the sender's thread and read by the receiver's, and an
// event-based actor's turns run one after another on whichever scheduler thread is free.
// CAF orders both, but inside libcaf_core, which is not built with ThreadSanitizer, so TSan
// cannot see it and would report every message field and every actor's state as a race.
// So each message struct ends with a MailboxOrder: copying or moving a message into CAF's
// mailbox (on the sender's thread, after every other field was written) is a release on the
// copy's token, and the receiving handler acquires on it (received(msg), or an ActorTurn).
// An ActorTurn also orders an actor's turns (below).
// Every handler of actors/ opens with one; the roles' shells (actors/roles.cc,
// actors/checkpoint_actor.cc) and the trainer's receives (actors/loader.cc) are the only
// users. Without TSan the token is an empty struct and all of it compiles to nothing.
//
// Thread-safety: as the message that holds it.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define SY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SY_TSAN 1
#endif
#endif

#if defined(SY_TSAN)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace shardyard::actors {

#if defined(SY_TSAN)
struct MailboxOrder {
  MailboxOrder() { release(); }
  MailboxOrder(const MailboxOrder&) { release(); }
  MailboxOrder& operator=(const MailboxOrder&) {
    release();
    return *this;
  }
  void acquire() const { __tsan_acquire(const_cast<MailboxOrder*>(this)); }
  // The message's fields were written after the token was made (deserialized from another
  // process, actors/protocol.h): release again.
  void loaded() const { release(); }

 private:
  void release() const { __tsan_release(const_cast<MailboxOrder*>(this)); }
};
#else
struct MailboxOrder {
  void acquire() const {}
  void loaded() const {}
};
#endif

// The same for data that is not a message of ours (the context of a caf::error).
#if defined(SY_TSAN)
inline void release_at(const void* p) { __tsan_release(const_cast<void*>(p)); }
inline void acquire_at(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
#else
inline void release_at(const void*) {}
inline void acquire_at(const void*) {}
#endif

// The first call of a handler: what the sender wrote into `msg` happened before.
template <class Message>
void received(const Message& msg) {
  msg.order.acquire();
}

// One turn of an actor (a handler, or the function that builds its behavior). CAF runs an
// event-based actor's turns one after another, but on whichever scheduler thread is free,
// and hands it from thread to thread inside libcaf_core. A turn acquires at its start and
// releases at its end, so TSan sees each turn after the ones before it. It does so on one
// address for all actors, not on the actor's own: a response handler must not read its
// captures (the actor among them) before the acquire. That orders every turn after every
// earlier turn of any actor, which is more than CAF promises, so TSan can miss a race between
// two actors' turns that share unguarded data; a race with any other thread (the trainer,
// collators, a worker's unit while it runs) is still reported.
inline char actor_turns = 0;  // only its address is used

class ActorTurn {
 public:
  ActorTurn() { acquire_at(&actor_turns); }
  template <class Message>
  explicit ActorTurn(const Message& msg) : ActorTurn() {
    received(msg);
  }
  ~ActorTurn() { release_at(&actor_turns); }
  ActorTurn(const ActorTurn&) = delete;
  ActorTurn& operator=(const ActorTurn&) = delete;
};

// The last data member of every actor's state. CAF destroys a state on whichever thread lets
// go of the actor last: often the trainer's or the service's, when it drops its handle after
// the actor's final turn. CAF orders that inside libcaf_core; acquiring the turns' order
// before the other members go shows it to TSan too.
struct AfterTurns {
  AfterTurns() = default;
  AfterTurns(const AfterTurns&) = delete;
  AfterTurns& operator=(const AfterTurns&) = delete;
  ~AfterTurns() { acquire_at(&actor_turns); }
};

}  // namespace shardyard::actors

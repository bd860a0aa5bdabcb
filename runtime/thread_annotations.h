// Clang's thread-safety annotations (-Wthread-safety), as macros that expand to nothing on
// other compilers. A field says which mutex guards it (SY_GUARDED_BY), a function which
// mutex it needs held (SY_REQUIRES) or takes (SY_ACQUIRE, SY_RELEASE); clang then proves at
// compile time that every access holds the lock. The clang builds of this project treat a
// violation as an error (CMakeLists.txt). Use them with runtime/mutex.h: libstdc++'s
// std::mutex carries no annotations.
//
// Thread-safety: macros only.
#pragma once

#if defined(__clang__)
#define SY_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SY_THREAD_ANNOTATION(x)
#endif

#define SY_CAPABILITY(x) SY_THREAD_ANNOTATION(capability(x))
#define SY_SCOPED_CAPABILITY SY_THREAD_ANNOTATION(scoped_lockable)
#define SY_GUARDED_BY(x) SY_THREAD_ANNOTATION(guarded_by(x))
#define SY_PT_GUARDED_BY(x) SY_THREAD_ANNOTATION(pt_guarded_by(x))
#define SY_REQUIRES(...) SY_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SY_ACQUIRE(...) SY_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SY_RELEASE(...) SY_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define SY_EXCLUDES(...) SY_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SY_ASSERT_HELD(x) SY_THREAD_ANNOTATION(assert_capability(x))
#define SY_NO_THREAD_SAFETY_ANALYSIS SY_THREAD_ANNOTATION(no_thread_safety_analysis)

// InlineVector<T, N>: a vector whose first N elements live inside the object, so that a
// container that is nearly always small (an item's fields) costs no heap allocation and no
// free on another thread. Past N it moves to the heap like std::vector. Iterators are
// pointers; they are invalidated by anything that changes the size, and by moving the
// vector while its elements are inline.
//
// Thread-compatible, like std::vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace shardyard {

template <typename T, size_t N>
class InlineVector {
  static_assert(N > 0, "InlineVector needs room for at least one element inline");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;

  InlineVector() = default;
  InlineVector(std::initializer_list<T> values) { append(values.begin(), values.end()); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  InlineVector(It first, It last) {
    append(first, last);
  }
  InlineVector(const InlineVector& other) { append(other.begin(), other.end()); }
  InlineVector(InlineVector&& other) noexcept { take(std::move(other)); }
  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) {
      clear();
      append(other.begin(), other.end());
    }
    return *this;
  }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) {
      release();
      take(std::move(other));
    }
    return *this;
  }
  InlineVector& operator=(std::initializer_list<T> values) {
    clear();
    append(values.begin(), values.end());
    return *this;
  }
  ~InlineVector() { release(); }

  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("InlineVector::at");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("InlineVector::at");
    return data_[i];
  }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  void clear() {
    std::destroy(begin(), end());
    size_ = 0;
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) {
      // Built before growing: an argument may be an element of this vector.
      T v(std::forward<Args>(args)...);
      grow(capacity_ * 2);
      ::new (static_cast<void*>(data_ + size_)) T(std::move(v));
    } else {
      ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void pop_back() { std::destroy_at(data_ + --size_); }
  iterator insert(const_iterator pos, T v) {
    const size_t at = static_cast<size_t>(pos - data_);
    emplace_back(std::move(v));
    std::rotate(data_ + at, data_ + size_ - 1, data_ + size_);
    return data_ + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    T* const from = data_ + (first - data_);
    T* const to = data_ + (last - data_);
    T* const new_end = std::move(to, end(), from);
    std::destroy(new_end, end());
    size_ = static_cast<size_t>(new_end - data_);
    return from;
  }
  void resize(size_t n) {
    if (n < size_) {
      erase(begin() + n, end());
      return;
    }
    reserve(n);
    while (size_ < n) emplace_back();
  }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const InlineVector& a, const InlineVector& b) { return !(a == b); }

 private:
  bool is_inline() const { return data_ == inline_data(); }
  T* inline_data() { return std::launder(reinterpret_cast<T*>(inline_)); }
  const T* inline_data() const { return std::launder(reinterpret_cast<const T*>(inline_)); }

  template <typename It>
  void append(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag,
                                    typename std::iterator_traits<It>::iterator_category>)
      reserve(size_ + static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) emplace_back(*first);
  }
  void grow(size_t n) {
    n = std::max(n, N);
    T* fresh = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    std::uninitialized_move(begin(), end(), fresh);
    std::destroy(begin(), end());
    if (!is_inline()) ::operator delete (data_, std::align_val_t{alignof(T)});
    data_ = fresh;
    capacity_ = n;
  }
  // Destroys the elements and frees the heap block; leaves the vector inline and empty.
  void release() {
    clear();
    if (!is_inline()) ::operator delete (data_, std::align_val_t{alignof(T)});
    data_ = inline_data();
    capacity_ = N;
  }
  // *this is inline and empty: takes other's elements (its block, or moves them one by
  // one from its inline room) and leaves other inline and empty.
  void take(InlineVector&& other) {
    if (other.is_inline()) {
      std::uninitialized_move(other.begin(), other.end(), data_);
      size_ = other.size_;
      other.clear();
      return;
    }
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.data_ = other.inline_data();
    other.size_ = 0;
    other.capacity_ = N;
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = inline_data();
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace shardyard

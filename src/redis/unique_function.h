// UniqueFunction: a move-only std::function (std::move_only_function is C++23), so that callbacks may
// own move-only completion handlers. Not thread-safe, like any value.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace sluice::redis::detail {

template <class Signature>
class UniqueFunction;

// A callable of up to kInline bytes that moves without throwing is kept inside the object, not on
// the heap: every decision passes through a few of these (the store's and the connection's
// callbacks), and their allocations were a good part of the client's CPU per decision.
template <class R, class... Args>
class UniqueFunction<R(Args...)> {
  static constexpr std::size_t kInline = 96;

 public:
  UniqueFunction() = default;
  template <class F>
  UniqueFunction(F f) {  // NOLINT: implicit
    if constexpr (sizeof(F) <= kInline && alignof(F) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<F>) {
      ::new (static_cast<void*>(&storage_)) F(std::move(f));
      ops_ = &kInlineOps<F>;
    } else {
      ::new (static_cast<void*>(&storage_)) F*(new F(std::move(f)));
      ops_ = &kHeapOps<F>;
    }
  }
  UniqueFunction(UniqueFunction&& o) noexcept : ops_(o.ops_) {
    if (ops_ != nullptr) ops_->move(&o.storage_, &storage_);
    o.ops_ = nullptr;
  }
  UniqueFunction& operator=(UniqueFunction&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_ != nullptr) ops_->move(&o.storage_, &storage_);
      o.ops_ = nullptr;
    }
    return *this;
  }
  UniqueFunction(const UniqueFunction&) = delete;
  UniqueFunction& operator=(const UniqueFunction&) = delete;
  ~UniqueFunction() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  R operator()(Args... args) { return ops_->call(&storage_, std::forward<Args>(args)...); }

 private:
  using Storage = std::aligned_storage_t<kInline, alignof(std::max_align_t)>;
  struct Ops {
    R (*call)(Storage*, Args&&...);
    void (*move)(Storage* from, Storage* to);  // leaves `from` destroyed
    void (*destroy)(Storage*);
  };
  template <class F>
  static F& inline_f(Storage* s) {
    return *std::launder(reinterpret_cast<F*>(s));
  }
  template <class F>
  static F*& heap_f(Storage* s) {
    return *std::launder(reinterpret_cast<F**>(s));
  }
  template <class F>
  static constexpr Ops kInlineOps{
      [](Storage* s, Args&&... args) -> R { return inline_f<F>(s)(std::forward<Args>(args)...); },
      [](Storage* from, Storage* to) {
        ::new (static_cast<void*>(to)) F(std::move(inline_f<F>(from)));
        inline_f<F>(from).~F();
      },
      [](Storage* s) { inline_f<F>(s).~F(); }};
  template <class F>
  static constexpr Ops kHeapOps{
      [](Storage* s, Args&&... args) -> R { return (*heap_f<F>(s))(std::forward<Args>(args)...); },
      [](Storage* from, Storage* to) { ::new (static_cast<void*>(to)) F*(heap_f<F>(from)); },
      [](Storage* s) { delete heap_f<F>(s); }};

  void reset() {
    if (ops_ != nullptr) ops_->destroy(&storage_);
    ops_ = nullptr;
  }

  Storage storage_;
  const Ops* ops_ = nullptr;
};

}  // namespace sluice::redis::detail

// UniqueFunction: a move-only std::function (std::move_only_function is C++23), so that callbacks may
// own move-only completion handlers. Not thread-safe, like any value.
#pragma once

#include <memory>
#include <utility>

namespace sluice::redis::detail {

template <class Signature>
class UniqueFunction;

template <class R, class... Args>
class UniqueFunction<R(Args...)> {
 public:
  UniqueFunction() = default;
  template <class F>
  UniqueFunction(F f) : impl_(std::make_unique<Impl<F>>(std::move(f))) {}  // NOLINT: implicit

  explicit operator bool() const { return impl_ != nullptr; }
  R operator()(Args... args) { return impl_->call(std::forward<Args>(args)...); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual R call(Args... args) = 0;
  };
  template <class F>
  struct Impl final : Base {
    explicit Impl(F fn) : f(std::move(fn)) {}
    R call(Args... args) override { return f(std::forward<Args>(args)...); }
    F f;
  };
  std::unique_ptr<Base> impl_;
};

}  // namespace sluice::redis::detail

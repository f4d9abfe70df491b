// Error and Result<T>: how sluice reports failures that are not rejections (bad specs, a store down).
// Value types; not synchronised, like any value.
#pragma once

#include <cassert>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace sluice {

// Why an operation failed. A rejection by a limiter is a Decision, never an Error.
enum class ErrorCode {
  kInvalidArgument = 1,  // a spec, key or cost that is out of range
  kStoreUnavailable,     // the store cannot be reached (Redis down, breaker open)
  kTimeout,              // the store did not answer in time; the operation may have run
  kProtocol,             // the store answered something we do not understand
  kNotFound,             // e.g. releasing a lease that does not exist (any more)
  kCircuitOpen,          // a circuit breaker rejected the call without making it
};

const char* to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInvalidArgument;
  std::string message;
};

// Either a T or an Error, in the manner of std::expected (C++23).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}      // NOLINT(google-explicit-constructor)
  // The value that make() returns, built where the Result keeps it rather than moved there (GCC
  // elides the move through Built's conversion; elsewhere it is at worst the move Result(T) makes).
  // For hot paths: moving a struct whose fields were just stored stalls on store forwarding.
  template <class F>
    requires std::is_same_v<std::invoke_result_t<F&>, T>
  Result(std::in_place_t, F&& make) : v_(std::in_place_index<0>, Built<F>{make}) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  template <class F>
  struct Built {
    F& make;
    operator T() const { return make(); }  // NOLINT(google-explicit-constructor)
  };

  std::variant<T, Error> v_;
};

// Result<void>: success or an Error. A success is one null pointer, so that passing one along
// (through every hop of an asynchronous completion) moves no string.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::make_unique<Error>(std::move(error))) {}  // NOLINT(google-explicit-constructor)
  Status(const Status& other) : error_(other.error_ ? std::make_unique<Error>(*other.error_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) error_ = other.error_ ? std::make_unique<Error>(*other.error_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  bool ok() const { return error_ == nullptr; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { assert(!ok()); return *error_; }

 private:
  std::unique_ptr<Error> error_;
};

inline Error invalid_argument(std::string message) {
  return Error{ErrorCode::kInvalidArgument, std::move(message)};
}

}  // namespace sluice

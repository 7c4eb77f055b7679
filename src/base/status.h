// Status and StatusOr<T>: errors as values (docs/style.md §4).
//
// Anything a user, a file or a request can cause returns a Status whose message names the
// tensor, field or rule that failed. Asserts are kept for programmer bugs only.
#ifndef VLSTACK_BASE_STATUS_H_
#define VLSTACK_BASE_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace vls {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // a caller-supplied value breaks a documented rule
  kNotFound = 2,            // a named file, tensor or key is absent
  kDataLoss = 3,            // a file is corrupt, truncated or lies about itself
  kOutOfRange = 4,          // an index or size exceeds a static bound
  kFailedPrecondition = 5,  // the object is in the wrong state for the call
  kUnimplemented = 6,       // a recognised but unsupported feature
  kInternal = 7,            // a bug; never caused by input
  kIoError = 8,             // the operating system refused a file operation
  kResourceExhausted = 9,   // out of memory, slots or capacity
  kCancelled = 10,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context + ": "` (the param is kept).
  Status WithContext(std::string_view context) const;

  // The request field the error is about, as data ("top_p", "messages[2].content[0].type"):
  // what an API answer names as the error's `param`. Empty when none was set. Set where a field
  // is refused; never derived from the message text.
  const std::string& param() const { return param_; }
  // Returns a copy with `param` set (an OK status stays OK, with no param).
  Status WithParam(std::string param) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string param_;  // empty in the common case: no allocation
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // REQUIRES: !status.ok()
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok());
    if (status_.ok()) status_ = Internal("StatusOr constructed from OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok()
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace vls

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` may be a declaration such as `int x`.
#define VLS_CONCAT_INNER_(a, b) a##b
#define VLS_CONCAT_(a, b) VLS_CONCAT_INNER_(a, b)

#define VLS_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::vls::Status vls_status_ = (expr);        \
    if (!vls_status_.ok()) return vls_status_; \
  } while (0)

#define VLS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define VLS_ASSIGN_OR_RETURN(lhs, expr) \
  VLS_ASSIGN_OR_RETURN_IMPL_(VLS_CONCAT_(vls_statusor_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)

#endif  // VLSTACK_BASE_STATUS_H_

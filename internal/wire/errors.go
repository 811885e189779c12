package wire

import (
	"errors"
	"fmt"
)

// Error codes. Each is also a sentinel (see the Err variables) so callers can
// test a reply error with errors.Is.
const (
	CodeBadRequest   = "bad_request"
	CodeNotFound     = "not_found"
	CodeForbidden    = "forbidden"
	CodeConflict     = "conflict"
	CodeInsufficient = "insufficient_funds"
	CodeExpired      = "expired"
	CodeUnavailable  = "unavailable"
	CodeInternal     = "internal"
)

// Sentinel errors, one per code. Domain packages wrap these in their own
// sentinels (fmt.Errorf("%w: unknown account", wire.ErrNotFound)) so that a
// handler can turn any error into the right code with ToError, and a client
// can match the *Error it receives with errors.Is(err, wire.ErrNotFound).
var (
	ErrBadRequest   = &Error{Code: CodeBadRequest, Message: "bad request"}
	ErrNotFound     = &Error{Code: CodeNotFound, Message: "not found"}
	ErrForbidden    = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrConflict     = &Error{Code: CodeConflict, Message: "conflict"}
	ErrInsufficient = &Error{Code: CodeInsufficient, Message: "insufficient funds"}
	ErrExpired      = &Error{Code: CodeExpired, Message: "expired"}
	ErrUnavailable  = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrInternal     = &Error{Code: CodeInternal, Message: "internal error"}
)

var sentinels = []*Error{ErrBadRequest, ErrNotFound, ErrForbidden, ErrConflict,
	ErrInsufficient, ErrExpired, ErrUnavailable, ErrInternal}

// Error is the error half of a reply envelope.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Progress, on an unavailable answer, says how far the request's work
	// has come meanwhile (a spend placing bids on many hosts): asked again
	// with the same id, it answers once done.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is how much of a long request's work is done: Done of Of
// units (hosts that answered their bids, for a spend).
type Progress struct {
	Done int    `json:"done"`
	Of   int    `json:"of"`
	What string `json:"what"`
}

func (e *Error) Error() string { return e.Message }

// Is makes every *Error with the same code match, so errors.Is(err,
// wire.ErrNotFound) holds for a not_found reply whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns a new error of the category of sentinel (one of the Err
// variables) with a formatted message.
func Errorf(sentinel *Error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// ToError turns any error into a reply error: the code of the first sentinel
// it wraps (internal if none) and the error's full message.
func ToError(err error) *Error {
	var we *Error
	if errors.As(err, &we) && err == error(we) {
		return we
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return &Error{Code: s.Code, Message: err.Error()}
		}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

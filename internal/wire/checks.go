package wire

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/internal/money"
)

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	idRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}$`)
)

// CheckName validates the name of a user, host or VM: 1–64 characters of
// letters, digits, '-' and '_', starting with a letter or digit. Names become
// NATS subject tokens, so dots, wildcards and spaces are refused.
func CheckName(what, s string) error {
	if !nameRE.MatchString(s) {
		return Errorf(ErrBadRequest, "invalid %s %q: use 1-64 letters, digits, '-' or '_'", what, s)
	}
	return nil
}

// CheckID validates an idempotency id (transfer, hold, plan): 1–200
// characters of letters, digits and "_.:/@-".
func CheckID(what, s string) error {
	if !idRE.MatchString(s) {
		return Errorf(ErrBadRequest, "invalid %s %q: use 1-200 letters, digits or _.:/@-", what, s)
	}
	return nil
}

// CheckPublicKey validates an NKey user public key ("U…").
func CheckPublicKey(k string) error {
	if !nkeys.IsValidPublicUserKey(k) {
		return Errorf(ErrBadRequest, "invalid NKey public user key %q", k)
	}
	return nil
}

func checkAmount(what string, m money.Micro) error {
	if err := m.CheckPositive(); err != nil {
		return Errorf(ErrBadRequest, "%s %d micro-credits: %v", what, int64(m), err)
	}
	return nil
}

// MaxMemo bounds a memo's length.
const MaxMemo = 200

func checkMemo(m string) error {
	if len(m) > MaxMemo {
		return Errorf(ErrBadRequest, "memo longer than %d bytes", MaxMemo)
	}
	return nil
}

// Duration is a time.Duration that travels as a Go duration string.
type Duration time.Duration

// MarshalJSON encodes d as "1h30m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"10m\": %w", err)
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MaxDuration bounds every bid and plan: a year. Longer is a mistake.
const MaxDuration = 366 * 24 * time.Hour

// CheckDuration validates a bid or plan duration: above zero, at most a year.
func CheckDuration(d Duration) error {
	if d.D() <= 0 {
		return Errorf(ErrBadRequest, "duration must be greater than zero, got %s", d.D())
	}
	if d.D() > MaxDuration {
		return Errorf(ErrBadRequest, "duration %s is above the maximum of %s", d.D(), MaxDuration)
	}
	return nil
}

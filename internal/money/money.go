// Package money is mrmarket's only representation of money: exact int64
// micro-credits.
//
// One credit is 1,000,000 micro-credits. Balances, holds, budgets and captures
// are always Micro; floats appear only in shares and in display. Arithmetic is
// overflow-checked, and amounts above Max are rejected as absurd wherever they
// enter the system, so that a sum of a few legal amounts can never wrap.
//
// The charge of a bid (budget B over duration D) after elapsed time t is the
// cumulative Charge(B, t, D) = floor(B·t/D), computed with a 128-bit
// intermediate. Charging loops capture the difference between successive
// cumulative charges, so a bid that runs its full duration is charged exactly
// B however its ticks were spaced.
package money

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Micro is an amount of money in micro-credits.
type Micro int64

const (
	// PerCredit is the number of micro-credits in one credit.
	PerCredit Micro = 1_000_000
	// Max is the largest amount accepted anywhere (one trillion credits).
	// Anything larger is a typo or an attack, and Max·9 still fits in int64.
	Max Micro = 1_000_000_000_000 * PerCredit
	// decimals is the number of fractional digits of a credit.
	decimals = 6
)

// Errors returned by this package; callers wrap them with %w.
var (
	// ErrSyntax means the text is not a decimal amount such as "12.5".
	ErrSyntax = errors.New("money: not a decimal amount (examples: 12, 12.5, 0.000001)")
	// ErrPrecision means the text has more than six fractional digits.
	ErrPrecision = errors.New("money: more than 6 decimal places (the smallest unit is 0.000001)")
	// ErrTooLarge means the amount is above Max.
	ErrTooLarge = errors.New("money: amount above the maximum of 1000000000000 credits")
	// ErrNotPositive means a positive amount was required.
	ErrNotPositive = errors.New("money: amount must be greater than zero")
	// ErrOverflow means an arithmetic result does not fit in int64.
	ErrOverflow = errors.New("money: arithmetic overflow")
	// ErrDuration means a charge was asked for a non-positive duration.
	ErrDuration = errors.New("money: duration must be greater than zero")
)

// Parse parses a human amount in credits: an optional minus sign, digits,
// and up to six fractional digits ("12", "12.5", "-3", "0.000001"). It never
// rounds: extra precision is an error. The magnitude must not exceed Max.
// The text is the amount and nothing else: a plus sign or a space around it
// (" 5", "+5") is a syntax error, as an amount that looks unlike what is
// printed (String never writes them) is more likely a slip than intended.
func Parse(s string) (Micro, error) {
	orig := s
	neg := false
	if s != "" && s[0] == '-' {
		neg = true
		s = s[1:]
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" && frac == "" || hasDot && frac == "" || !allDigits(whole) || !allDigits(frac) {
		return 0, fmt.Errorf("%w: %q", ErrSyntax, orig)
	}
	if len(frac) > decimals {
		return 0, fmt.Errorf("%w: %q", ErrPrecision, orig)
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 13 { // more than 13 digits of credits is above Max anyway
		return 0, fmt.Errorf("%w: %q", ErrTooLarge, orig)
	}
	var w, f int64
	if whole != "" {
		w, _ = strconv.ParseInt(whole, 10, 64) // digits only, ≤ 13 of them: cannot fail
	}
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", decimals-len(frac)), 10, 64)
	}
	m := Micro(w)*PerCredit + Micro(f)
	if m > Max {
		return 0, fmt.Errorf("%w: %q", ErrTooLarge, orig)
	}
	if neg {
		m = -m
	}
	return m, nil
}

// ParsePositive parses an amount that must be above zero and at most Max, as
// every budget, grant, hold and transfer must be.
func ParsePositive(s string) (Micro, error) {
	m, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if err := m.CheckPositive(); err != nil {
		return 0, fmt.Errorf("%w: %q", err, s)
	}
	return m, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// CheckPositive reports whether m is a legal positive amount: 0 < m ≤ Max.
func (m Micro) CheckPositive() error {
	if m <= 0 {
		return ErrNotPositive
	}
	if m > Max {
		return ErrTooLarge
	}
	return nil
}

// String prints m in credits with the fewest digits that are exact:
// 12500000 → "12.5", 1 → "0.000001", -3000000 → "-3".
func (m Micro) String() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = -u // two's complement: correct for math.MinInt64 too
	}
	whole, frac := u/uint64(PerCredit), u%uint64(PerCredit)
	s := strconv.FormatUint(whole, 10)
	if frac != 0 {
		fs := fmt.Sprintf("%06d", frac)
		s += "." + strings.TrimRight(fs, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Credits returns m as a float number of credits, for display and for rate
// arithmetic that is allowed to be inexact (shares). Never store the result.
func (m Micro) Credits() float64 { return float64(m) / float64(PerCredit) }

// Add returns a+b or ErrOverflow.
func Add(a, b Micro) (Micro, error) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, ErrOverflow
	}
	return s, nil
}

// Sub returns a-b or ErrOverflow.
func Sub(a, b Micro) (Micro, error) {
	if b == math.MinInt64 {
		return 0, ErrOverflow
	}
	return Add(a, -b)
}

// Sum adds all amounts, failing on overflow.
func Sum(ms ...Micro) (Micro, error) {
	var t Micro
	for _, m := range ms {
		var err error
		if t, err = Add(t, m); err != nil {
			return 0, err
		}
	}
	return t, nil
}

// Charge returns the cumulative charge floor(budget·elapsed/duration) of a bid
// after elapsed time, with elapsed clamped to [0, duration]. The product is
// computed in 128 bits, so any budget ≤ Max and any durations are exact.
// budget must be ≥ 0 and duration > 0.
func Charge(budget Micro, elapsed, duration time.Duration) (Micro, error) {
	if duration <= 0 {
		return 0, ErrDuration
	}
	if budget < 0 {
		return 0, fmt.Errorf("money: negative budget %s", budget)
	}
	if elapsed <= 0 {
		return 0, nil
	}
	if elapsed >= duration {
		return budget, nil
	}
	hi, lo := bits.Mul64(uint64(budget), uint64(elapsed))
	// hi < duration holds because budget·elapsed < budget·duration, so the
	// quotient fits in 64 bits and Div64 cannot panic.
	q, _ := bits.Div64(hi, lo, uint64(duration))
	return Micro(q), nil
}

// Split divides total into n parts that differ by at most one micro-credit
// and sum exactly to total (the first total mod n parts get the extra unit).
// total must be ≥ 0 and n > 0.
func Split(total Micro, n int) []Micro {
	parts := make([]Micro, n)
	base, rem := total/Micro(n), total%Micro(n)
	for i := range parts {
		parts[i] = base
		if Micro(i) < rem {
			parts[i]++
		}
	}
	return parts
}

// Rate is the spending rate of a bid in micro-credits per second, as a float:
// rates feed the share rule, which is float arithmetic by design.
func Rate(budget Micro, duration time.Duration) float64 {
	if duration <= 0 {
		return 0
	}
	return float64(budget) / duration.Seconds()
}

package money

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Micro
		err  error
	}{
		{"12.5", 12_500_000, nil},
		{"0.000001", 1, nil},
		{"12", 12_000_000, nil},
		{"-3", -3_000_000, nil},
		// Only what String could have written: no plus sign, no space.
		{" 3.25 ", 0, ErrSyntax},
		{" 5", 0, ErrSyntax},
		{"5 ", 0, ErrSyntax},
		{"\t5", 0, ErrSyntax},
		{"5\n", 0, ErrSyntax},
		{"+5", 0, ErrSyntax},
		{"+7.1", 0, ErrSyntax},
		{"- 3", 0, ErrSyntax},
		{"-+3", 0, ErrSyntax},
		{"-", 0, ErrSyntax},
		{".5", 500_000, nil},
		{"000012.500000", 12_500_000, nil},
		{"0", 0, nil},
		{"1000000000000", Max, nil},
		{"1000000000000.000001", 0, ErrTooLarge},
		{"99999999999999999999", 0, ErrTooLarge},
		{"0.0000001", 0, ErrPrecision},
		{"", 0, ErrSyntax},
		{".", 0, ErrSyntax},
		{"12.", 0, ErrSyntax},
		{"1e6", 0, ErrSyntax},
		{"12,5", 0, ErrSyntax},
		{"abc", 0, ErrSyntax},
		{"--1", 0, ErrSyntax},
		{"0x10", 0, ErrSyntax},
		{"NaN", 0, ErrSyntax},
		{"Inf", 0, ErrSyntax},
		{"1 2", 0, ErrSyntax},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if !errors.Is(err, tt.err) || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParsePositive(t *testing.T) {
	for _, in := range []string{"0", "-1", "-0.000001", "0.000000"} {
		if _, err := ParsePositive(in); !errors.Is(err, ErrNotPositive) {
			t.Errorf("ParsePositive(%q) err = %v, want ErrNotPositive", in, err)
		}
	}
	if m, err := ParsePositive("0.000001"); err != nil || m != 1 {
		t.Errorf("ParsePositive(0.000001) = %d, %v", m, err)
	}
}

func TestStringRoundTrip(t *testing.T) {
	cases := map[Micro]string{
		0: "0", 1: "0.000001", 12_500_000: "12.5", -3_000_000: "-3", Max: "1000000000000",
		10: "0.00001", 1_000_010: "1.00001",
	}
	for m, want := range cases {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(m), got, want)
		}
	}
	if got := Micro(math.MinInt64).String(); got != "-9223372036854.775808" {
		t.Errorf("MinInt64 prints %q", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		m := Micro(r.Int64N(int64(2*Max+1))) - Max
		back, err := Parse(m.String())
		if err != nil || back != m {
			t.Fatalf("round trip %d → %q → %d, %v", int64(m), m.String(), back, err)
		}
	}
}

func TestArithmeticOverflow(t *testing.T) {
	if _, err := Add(math.MaxInt64, 1); !errors.Is(err, ErrOverflow) {
		t.Errorf("MaxInt64+1: %v", err)
	}
	if _, err := Add(math.MinInt64, -1); !errors.Is(err, ErrOverflow) {
		t.Errorf("MinInt64-1: %v", err)
	}
	if _, err := Sub(0, math.MinInt64); !errors.Is(err, ErrOverflow) {
		t.Errorf("0-MinInt64: %v", err)
	}
	if _, err := Sub(math.MinInt64, 1); !errors.Is(err, ErrOverflow) {
		t.Errorf("MinInt64-1: %v", err)
	}
	if s, err := Sum(Max, Max, Max, -Max); err != nil || s != 2*Max {
		t.Errorf("Sum = %d, %v", s, err)
	}
	if _, err := Sum(math.MaxInt64/2, math.MaxInt64/2, 2); !errors.Is(err, ErrOverflow) {
		t.Errorf("Sum overflow: %v", err)
	}
}

func TestCheckPositive(t *testing.T) {
	for _, m := range []Micro{0, -1, Max + 1, math.MinInt64} {
		if m.CheckPositive() == nil {
			t.Errorf("%d accepted", int64(m))
		}
	}
	for _, m := range []Micro{1, Max} {
		if err := m.CheckPositive(); err != nil {
			t.Errorf("%d refused: %v", int64(m), err)
		}
	}
}

// chargeOracle is floor(B·t/D) in arbitrary precision.
func chargeOracle(b Micro, t, d time.Duration) Micro {
	if t <= 0 {
		return 0
	}
	if t > d {
		t = d
	}
	x := new(big.Int).Mul(big.NewInt(int64(b)), big.NewInt(int64(t)))
	return Micro(x.Quo(x, big.NewInt(int64(d))).Int64())
}

func TestChargeMatchesBigIntOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 100000 {
		b := Micro(r.Int64N(int64(Max) + 1))
		d := time.Duration(r.Int64N(int64(366*24*time.Hour))) + 1
		el := time.Duration(r.Int64N(int64(d)+2)) - 1
		if i%7 == 0 {
			el = d + time.Duration(r.Int64N(1000))
		}
		got, err := Charge(b, el, d)
		if err != nil {
			t.Fatal(err)
		}
		if want := chargeOracle(b, el, d); got != want {
			t.Fatalf("Charge(%d, %v, %v) = %d, want %d", b, el, d, got, want)
		}
	}
}

func TestChargeIsMonotoneAndEndsAtBudget(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		b := Micro(r.Int64N(int64(Max))) + 1
		d := time.Duration(r.Int64N(int64(time.Hour))) + time.Millisecond
		var last Micro
		for el := time.Duration(0); el <= d+time.Second; el += time.Duration(r.Int64N(int64(d)/10+1)) + 1 {
			c, _ := Charge(b, el, d)
			if c < last || c > b {
				t.Fatalf("charge %d after %d (budget %d)", c, last, b)
			}
			last = c
		}
		if c, _ := Charge(b, d, d); c != b {
			t.Fatalf("full duration charged %d of %d", c, b)
		}
	}
}

func TestChargeBadInput(t *testing.T) {
	if _, err := Charge(10, time.Second, 0); !errors.Is(err, ErrDuration) {
		t.Errorf("duration 0: %v", err)
	}
	if _, err := Charge(-1, time.Second, time.Minute); err == nil {
		t.Error("negative budget accepted")
	}
}

func TestSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 1000 {
		total := Micro(r.Int64N(int64(Max)))
		n := r.IntN(1000) + 1
		parts := Split(total, n)
		sum, err := Sum(parts...)
		if err != nil || sum != total || len(parts) != n {
			t.Fatalf("Split(%d, %d) sums to %d", total, n, sum)
		}
		for _, p := range parts {
			if p < total/Micro(n) || p > total/Micro(n)+1 {
				t.Fatalf("uneven part %d of Split(%d, %d)", p, total, n)
			}
		}
	}
}

func ExampleCharge() {
	budget, _ := Parse("10")
	for _, el := range []time.Duration{0, time.Minute, 150 * time.Second, 3 * time.Minute} {
		c, _ := Charge(budget, el, 3*time.Minute)
		fmt.Println(el, c)
	}
	// Output:
	// 0s 0
	// 1m0s 3.333333
	// 2m30s 8.333333
	// 3m0s 10
}

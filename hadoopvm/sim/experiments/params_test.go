package experiments

import (
	"errors"
	"reflect"
	"testing"
)

// TestParams: --set changes an experiment's parameters by name, a list
// comma-separated; an unknown name, a value of the wrong kind or one out
// of range is refused with ErrParam; an experiment without parameters
// refuses any.
func TestParams(t *testing.T) {
	e, err := Get("mrm-pricing")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, p := range e.Params() {
		names = append(names, p.Name)
		if p.Doc == "" || p.Default == "" {
			t.Errorf("parameter %s undocumented or without default: %+v", p.Name, p)
		}
	}
	if want := []string{"alpha", "gap", "jobs"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("params %v, want %v", names, want)
	}
	p, err := e.withParams(map[string]string{"alpha": "1.2, 3", "jobs": "500"})
	if err != nil {
		t.Fatal(err)
	}
	got := p.(*mrmPricingParams)
	if !reflect.DeepEqual(got.Alphas, []float64{1.2, 3}) || got.Jobs != 500 || !reflect.DeepEqual(got.Gaps, []float64{50, 100, 200}) {
		t.Fatalf("params after --set: %+v", got)
	}
	for _, bad := range []map[string]string{
		{"alfa": "2"}, {"alpha": "x"}, {"jobs": "1.5"}, {"jobs": "5"}, {"alpha": "0.5"}, {"gap": ""}, {"alpha": "2 3"},
	} {
		if _, err := e.withParams(bad); !errors.Is(err, ErrParam) {
			t.Errorf("--set %v: %v, want ErrParam", bad, err)
		}
	}
	if _, err := ParseSet([]string{"novalue"}); !errors.Is(err, ErrParam) {
		t.Errorf("ParseSet without '=': %v", err)
	}
	plain := Experiment{Name: "plain"}
	if _, err := plain.withParams(map[string]string{"x": "1"}); !errors.Is(err, ErrParam) {
		t.Errorf("an experiment without parameters took one: %v", err)
	}
}

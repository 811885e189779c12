package experiments

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// ErrParam is a --set the experiment does not take: an unknown name or a
// value of the wrong kind.
var ErrParam = errors.New("experiments: bad parameter")

// Param is one of an experiment's settings, changed by
// `mrmarket sim run NAME --set name=value` and listed by
// `mrmarket sim describe NAME`.
type Param struct {
	Name    string `json:"name"`
	Default string `json:"default"` // as JSON
	Doc     string `json:"doc"`
}

// An experiment's parameters are one struct (its defaults, from
// Experiment.params): each exported field with a json tag is a parameter
// named by the tag and documented by its doc tag, or, where the doc is
// too long for a tag, by the struct's longDocs. A value is JSON of the
// field's type; a list may also be written comma-separated (0.75,0.9) and
// a string bare.

// longDocs gives the docs of parameters whose doc tag is missing, by name.
type longDocs interface{ longDocs() map[string]string }

// Params are e's parameters with their defaults, by name.
func (e Experiment) Params() []Param {
	if e.params == nil {
		return nil
	}
	p := e.params()
	long := map[string]string{}
	if l, ok := p.(longDocs); ok {
		long = l.longDocs()
	}
	v := reflect.ValueOf(p).Elem()
	var out []Param
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name := paramName(f)
		if name == "" {
			continue
		}
		def, _ := json.Marshal(v.Field(i).Interface())
		doc, ok := f.Tag.Lookup("doc")
		if !ok {
			doc = long[name]
		}
		out = append(out, Param{Name: name, Default: string(def), Doc: doc})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// paramName is field f's parameter name: its json tag's ("" if none).
func paramName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if !f.IsExported() || name == "-" {
		return ""
	}
	return name
}

// withParams is e's parameters (a pointer to its struct) at their
// defaults with set applied; nil for an experiment without any (then set
// must be empty).
func (e Experiment) withParams(set map[string]string) (any, error) {
	if e.params == nil {
		for name := range set {
			return nil, fmt.Errorf("%w: %s takes no parameters (%q)", ErrParam, e.Name, name)
		}
		return nil, nil
	}
	p := e.params()
	v := reflect.ValueOf(p).Elem()
	fields := map[string]reflect.Value{}
	for i := range v.NumField() {
		if name := paramName(v.Type().Field(i)); name != "" {
			fields[name] = v.Field(i)
		}
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := fields[name]
		if !ok {
			known := make([]string, 0, len(fields))
			for k := range fields {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("%w: %s has no parameter %q (known: %s)", ErrParam, e.Name, name, strings.Join(known, ", "))
		}
		raw := strings.TrimSpace(set[name])
		switch f.Kind() {
		case reflect.Slice:
			if !strings.HasPrefix(raw, "[") {
				raw = "[" + raw + "]"
			}
		case reflect.String:
			if !strings.HasPrefix(raw, `"`) {
				b, _ := json.Marshal(raw)
				raw = string(b)
			}
		}
		nv := reflect.New(f.Type())
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(nv.Interface()); err != nil || dec.More() {
			return nil, fmt.Errorf("%w: %s=%s: want %s", ErrParam, name, set[name], f.Type())
		}
		f.Set(nv.Elem())
	}
	if c, ok := p.(interface{ check() error }); ok {
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrParam, err)
		}
	}
	return p, nil
}

// ParseSet reads `--set name=value` arguments into a map; a name given
// twice keeps the last value.
func ParseSet(args []string) (map[string]string, error) {
	set := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if name = strings.TrimSpace(name); !ok || name == "" {
			return nil, fmt.Errorf("%w: %q is not name=value", ErrParam, a)
		}
		set[name] = value
	}
	return set, nil
}

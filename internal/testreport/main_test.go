package main

import (
	"strings"
	"testing"
)

// A stream as `go test -json` writes it: one package passing with a
// skipped test, one failing, one that did not build.
const stream = `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestGuests"}
{"Action":"output","Package":"a","Test":"TestGuests","Output":"=== RUN   TestGuests\n"}
{"Action":"output","Package":"a","Test":"TestGuests","Output":"    guests_test.go:68: libvirt is not running: start it with .ci/libvirt.sh\n"}
{"Action":"output","Package":"a","Test":"TestGuests","Output":"--- SKIP: TestGuests (0.00s)\n"}
{"Action":"skip","Package":"a","Test":"TestGuests"}
{"Action":"run","Package":"a","Test":"TestShares"}
{"Action":"output","Package":"a","Test":"TestShares","Output":"    shares_test.go:10: measured 0.75\n"}
{"Action":"pass","Package":"a","Test":"TestShares"}
{"Action":"output","Package":"a","Output":"PASS\n"}
{"Action":"output","Package":"a","Output":"ok  \ta\t0.124s\n"}
{"Action":"pass","Package":"a"}
{"Action":"run","Package":"b","Test":"TestMoney"}
{"Action":"output","Package":"b","Test":"TestMoney","Output":"    money_test.go:5: lost 1 credit\n"}
{"Action":"output","Package":"b","Test":"TestMoney","Output":"--- FAIL: TestMoney (0.01s)\n"}
{"Action":"fail","Package":"b","Test":"TestMoney"}
{"Action":"run","Package":"b","Test":"TestFine"}
{"Action":"output","Package":"b","Test":"TestFine","Output":"    fine_test.go:5: all good\n"}
{"Action":"pass","Package":"b","Test":"TestFine"}
{"Action":"output","Package":"b","Output":"FAIL\n"}
{"Action":"output","Package":"b","Output":"FAIL\tb\t0.020s\n"}
{"Action":"fail","Package":"b"}
{"ImportPath":"c","Action":"build-output","Output":"c/c.go:3:1: syntax error\n"}
{"ImportPath":"c","Action":"build-fail"}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	failed := report(strings.NewReader(stream), &out)
	want := "ok  \ta\t0.124s\n" +
		"    SKIP TestGuests: libvirt is not running: start it with .ci/libvirt.sh\n" +
		"--- FAIL: TestMoney\n" +
		"    money_test.go:5: lost 1 credit\n" +
		"FAIL\n" +
		"FAIL\tb\t0.020s\n" +
		"c/c.go:3:1: syntax error\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	if !failed {
		t.Error("a failed package and a failed build reported as success")
	}
}

func TestReportPassing(t *testing.T) {
	var out strings.Builder
	ok := strings.SplitAfterN(stream, `{"Action":"run","Package":"b"`, 2)[0]
	ok = strings.TrimSuffix(ok, `{"Action":"run","Package":"b"`)
	if report(strings.NewReader(ok), &out) {
		t.Errorf("a passing package reported as failed:\n%s", out.String())
	}
}

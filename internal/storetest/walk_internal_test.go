package storetest

import (
	"reflect"
	"strings"
	"testing"
)

type fakeInner struct {
	Get  string
	Many func(n int) string
	None func(n int) string
}

type fakeSet struct {
	Inner fakeInner
	Top   string
}

// Walk names nested fields, calls func fields with every arity (a nil one
// reads as empty), and refuses a field of a kind it cannot check.
func TestWalkKinds(t *testing.T) {
	t.Parallel()
	s := fakeSet{
		Inner: fakeInner{Get: "SELECT 1", Many: func(n int) string { return strings.Repeat("x", n) }},
		Top:   "",
	}
	var out []Statement
	if err := walk(reflect.ValueOf(s), "", &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range out {
		names = append(names, st.Name()+"="+st.SQL)
	}
	want := "Inner.Get=SELECT 1,Inner.Many(1)=x,Inner.Many(3)=xxx,Inner.None(1)=,Inner.None(3)=,Top="
	if got := strings.Join(names, ","); got != want {
		t.Fatalf("walk = %s\nwant   %s", got, want)
	}

	type withInt struct{ N int }
	if err := walk(reflect.ValueOf(withInt{}), "", &out); err == nil || !strings.Contains(err.Error(), "N has type int") {
		t.Fatalf("an int field: %v, want an error naming it", err)
	}
	type panics struct{ F func(int) string }
	p := panics{F: func(n int) string { panic("n too small") }}
	if err := walk(reflect.ValueOf(p), "", &out); err == nil || !strings.Contains(err.Error(), "F(1): panicked") {
		t.Fatalf("a panicking builder: %v", err)
	}
}

package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"nats://user:pass@127.0.0.1:4222", "nats://user:xxxxx@127.0.0.1:4222"},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{"postgres://u@h/db?password=hunter2&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"nats://a:s1@h1:4222,nats://b:s2@h2:4222", "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222"},
		{"sqlite://./idem-data/idem.db", "sqlite://./idem-data/idem.db"},
	}
	for _, c := range cases {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestURLNeverEchoesUnparseable(t *testing.T) {
	in := "weird://user:secret@host:bad port/%zz"
	got := URL(in)
	if strings.Contains(got, "secret") {
		t.Fatalf("URL(%q) = %q leaks the password", in, got)
	}
}

func TestScheme(t *testing.T) {
	if got := Scheme("mongodb://root:pw@h"); got != "mongodb" {
		t.Fatalf("Scheme = %q", got)
	}
	if got := Scheme("pw@h"); got != "" {
		t.Fatalf("Scheme = %q, want empty", got)
	}
}

// FuzzURL checks that no password given in the userinfo or a password-like
// query parameter survives redaction.
func FuzzURL(f *testing.F) {
	f.Add("u", "p4ss-word", "h:1", "password")
	f.Add("admin", "s3cr3t", "[::1]:5432", "token")
	f.Add("a", "%zz", "h", "sslpassword")
	f.Fuzz(func(t *testing.T, user, pass, host, param string) {
		if len(pass) < 4 || strings.ContainsAny(pass, "@/?#%:") {
			return
		}
		for _, in := range []string{
			"postgres://" + user + ":" + pass + "@" + host + "/db",
			"postgres://" + host + "/db?password=" + pass,
		} {
			if strings.Contains(URL(in), pass) && !strings.Contains(in[:len(in)-len(pass)], pass) {
				t.Fatalf("URL(%q) = %q leaks %q", in, URL(in), pass)
			}
		}
	})
}

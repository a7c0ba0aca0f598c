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
	f.Add("nats", "t0k3n-abc", "127.0.0.1:4222", "PassWord")
	f.Fuzz(func(t *testing.T, user, pass, host, param string) {
		// Realistic shapes only: no delimiters inside the parts, and host
		// and user in the characters url.URL prints unescaped (escaping
		// could spell the password out of other bytes).
		plain := func(s, extra string) bool {
			for _, c := range s {
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(extra, c)) {
					return false
				}
			}
			return true
		}
		if len(pass) < 4 || strings.Contains(Mask, pass) || strings.ContainsAny(pass, "@/?#%:,&=+ ") || !plain(host, ".-_:[]") || !plain(user, ".-_") ||
			strings.ContainsAny(param, "&=#%+ ;") {
			return
		}
		for _, in := range []string{
			"postgres://" + user + ":" + pass + "@" + host + "/db",
			"postgres://" + host + "/db?password=" + pass,
			"postgres://" + host + "/db?" + param + "=" + pass,
			"nats://" + pass + "@" + host,
			"nats://" + user + ":" + pass + "@" + host + ",nats://" + host,
			user + ":" + pass + "@" + host,
		} {
			if strings.HasPrefix(in, "postgres://"+host+"/db?"+param) && !secretParams[strings.ToLower(param)] {
				continue
			}
			if strings.Contains(URL(in), pass) && !strings.Contains(in[:len(in)-len(pass)], pass) {
				t.Fatalf("URL(%q) = %q leaks %q", in, URL(in), pass)
			}
		}
	})
}

func TestURLTokensAndOpaque(t *testing.T) {
	cases := []struct{ in, secret, want string }{
		{"nats://s3cr3tt0ken@127.0.0.1:4222", "s3cr3tt0ken", "nats://xxxxx@127.0.0.1:4222"},
		{"tls://s3cr3tt0ken@h:4222", "s3cr3tt0ken", "tls://xxxxx@h:4222"},
		{"user:hunter22@host:4222", "hunter22", "xxxxx@host:4222"},
		{"postgres://postgres@h/db", "", "postgres://postgres@h/db"},
		{"postgres://h/db?sslmode=disable&PASSWORD=hunter22", "hunter22", "postgres://h/db?PASSWORD=xxxxx&sslmode=disable"},
	}
	for _, c := range cases {
		got := URL(c.in)
		if got != c.want || (c.secret != "" && strings.Contains(got, c.secret)) {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

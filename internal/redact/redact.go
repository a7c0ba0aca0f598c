// Package redact makes connection URLs safe to print: passwords in the
// userinfo and password-like query parameters are replaced by "xxxxx".
package redact

import (
	"net/url"
	"strings"
)

// secretParams are query parameters whose values are credentials, compared
// in lower case.
var secretParams = map[string]bool{
	"password": true, "pass": true, "passwd": true, "pwd": true,
	"secret": true, "token": true, "auth_token": true, "access_token": true,
	"sslpassword": true, "sslkey": true, "api_key": true, "apikey": true,
	"key": true, "nkey": true, "jwt": true, "creds": true,
}

// Mask is what stands in place of a secret.
const Mask = "xxxxx"

// URL returns u with its password and password-like query parameters
// masked. A value that does not parse as a URL is returned as a placeholder
// that names only its scheme (when one can be seen), never the raw text.
// A comma-separated list of URLs (a NATS server list) is redacted element by
// element.
func URL(u string) string {
	if strings.Contains(u, ",") {
		parts := strings.Split(u, ",")
		for i, p := range parts {
			parts[i] = URL(strings.TrimSpace(p))
		}
		return strings.Join(parts, ",")
	}
	p, err := url.Parse(u)
	if err != nil {
		if i := strings.Index(u, "://"); i > 0 && isScheme(u[:i]) {
			return u[:i] + "://(unparseable URL)"
		}
		return "(unparseable URL)"
	}
	if p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), Mask)
		}
	}
	if p.RawQuery != "" {
		q, err := url.ParseQuery(p.RawQuery)
		if err != nil {
			p.RawQuery = Mask
		} else {
			changed := false
			for k, vs := range q {
				if secretParams[strings.ToLower(k)] {
					for i := range vs {
						vs[i] = Mask
					}
					changed = true
				}
			}
			if changed {
				p.RawQuery = q.Encode()
			}
		}
	}
	s := p.String()
	// url.URL.String escapes the mask's userinfo; keep it readable.
	return s
}

// Scheme returns the scheme of u for error messages ("postgres", "nats"),
// or "" when u has none that looks like a scheme. It never returns any
// other part of u.
func Scheme(u string) string {
	i := strings.Index(u, "://")
	if i <= 0 || !isScheme(u[:i]) {
		return ""
	}
	return u[:i]
}

func isScheme(s string) bool {
	if len(s) > 32 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

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
// masked, and for NATS URLs (nats, tls, ws, wss) a user name given without
// a password, which is a token. A value that does not parse as a URL is returned as a placeholder
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
	if i := strings.LastIndex(u, "@"); i >= 0 && !strings.Contains(u, "://") {
		// No authority to parse ("user:pass@host" reads as scheme "user"
		// with an opaque rest): everything before the "@" may be secret.
		return Mask + u[i:]
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
		} else if tokenSchemes[strings.ToLower(p.Scheme)] && p.User.Username() != "" {
			// nats://TOKEN@host: a lone user name is a token.
			p.User = url.User(Mask)
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
	return p.String()
}

// tokenSchemes are the schemes whose user name alone is a credential (NATS
// token authentication: nats://TOKEN@host).
var tokenSchemes = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

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

package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// cookieName is the console's session cookie.
const cookieName = "idem_console"

// sessionTTL is how long a login lasts.
const sessionTTL = 12 * time.Hour

// HeaderOperator names the operator of a Bearer-authenticated request in
// the audit log ("who"). Defaults to "bearer".
const HeaderOperator = "Idem-Operator"

type actorKey struct{}

// actor returns who is acting in r (set by the auth middleware).
func actor(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// tokenOK compares a presented token with the configured one in constant
// time (both hashed, so their lengths do not leak either).
func (c *Console[TTx]) tokenOK(t string) bool {
	h := sha256.Sum256([]byte(t))
	return subtle.ConstantTimeCompare(h[:], c.tokenH[:]) == 1
}

// sign is the cookie MAC of name and expiry under the token.
func (c *Console[TTx]) sign(name string, exp int64) string {
	m := hmac.New(sha256.New, []byte("idem-console-session\x00"+c.cfg.Token))
	m.Write([]byte(name + "\x00" + strconv.FormatInt(exp, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sessionCookie makes the cookie value for name: name.expiry.mac.
func (c *Console[TTx]) sessionCookie(name string) (string, time.Time) {
	exp := c.now().Add(sessionTTL)
	e := exp.Unix()
	return base64.RawURLEncoding.EncodeToString([]byte(name)) + "." + strconv.FormatInt(e, 10) + "." + c.sign(name, e), exp
}

// session reads the operator name from a valid, unexpired cookie.
func (c *Console[TTx]) session(r *http.Request) (string, bool) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return "", false
	}
	parts := strings.Split(ck.Value, ".")
	if len(parts) != 3 {
		return "", false
	}
	nb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || c.now().Unix() >= exp {
		return "", false
	}
	if !hmac.Equal([]byte(parts[2]), []byte(c.sign(string(nb), exp))) {
		return "", false
	}
	return string(nb), true
}

// authenticate returns who is behind r, or false.
func (c *Console[TTx]) authenticate(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		t, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || !c.tokenOK(strings.TrimSpace(t)) {
			return "", false
		}
		who := operatorName(r.Header.Get(HeaderOperator))
		if who == "" {
			who = "bearer"
		}
		return who, true
	}
	return c.session(r)
}

// operatorName bounds and cleans an operator name (printable, ≤ 64 runes).
func operatorName(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, ""))
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			continue
		}
		if utf8.RuneCountInString(b.String()) >= 64 {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// requireAuth lets authenticated requests through with their actor in the
// context. Others change nothing: a browser GET is sent to the login page,
// anything else answers 401.
func (c *Console[TTx]) requireAuth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok := c.authenticate(r)
		if !ok {
			if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Authorization") == "" {
				http.Redirect(w, r, c.path("/login")+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem console"`)
			c.renderError(w, r, http.StatusUnauthorized, "Unauthorized", "this request needs the console token")
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, who)))
	})
}

// safeNext keeps a post-login redirect inside the console.
func (c *Console[TTx]) safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.IsAbs() || u.Host != "" || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") ||
		!(u.Path == c.cfg.Prefix || strings.HasPrefix(u.Path, c.cfg.Prefix+"/")) {
		return c.path("/")
	}
	return u.RequestURI()
}

func (c *Console[TTx]) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", "Log in", map[string]any{"Next": c.safeNext(r.URL.Query().Get("next"))})
}

func (c *Console[TTx]) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.renderError(w, r, http.StatusBadRequest, "Bad request", "the form could not be read")
		return
	}
	next := c.safeNext(r.PostForm.Get("next"))
	name := operatorName(r.PostForm.Get("name"))
	if !c.tokenOK(r.PostForm.Get("token")) || name == "" {
		c.render(w, r, http.StatusUnauthorized, "login", "Log in", map[string]any{"Next": next,
			"Failed": "wrong token, or no name given"})
		return
	}
	v, exp := c.sessionCookie(name)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: v, Path: c.path("/"), Expires: exp, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.cfg.SecureCookie || r.TLS != nil})
	c.log.InfoContext(r.Context(), "console login", "actor", name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console[TTx]) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: c.path("/"), MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.cfg.SecureCookie || r.TLS != nil})
	http.Redirect(w, r, c.path("/login"), http.StatusSeeOther)
}

// routes builds the console's handler: every route behind the
// cross-origin check, all but login and assets behind the token.
func (c *Console[TTx]) routes() http.Handler {
	p := c.cfg.Prefix
	open := http.NewServeMux()
	open.HandleFunc("GET "+p+"/login", c.loginPage)
	open.HandleFunc("POST "+p+"/login", c.login)
	open.HandleFunc("POST "+p+"/logout", c.logout)
	open.Handle("GET "+p+"/assets/", http.StripPrefix(p+"/assets/", c.assetHandler()))
	open.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
	})

	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/{$}", c.overview)
	m.HandleFunc("GET "+p+"/dlq", c.dlqList)
	m.HandleFunc("GET "+p+"/dlq/bulk", c.dlqBulkConfirm)
	m.HandleFunc("POST "+p+"/dlq/bulk", c.action(c.dlqBulk))
	m.HandleFunc("GET "+p+"/dlq/{id}", c.dlqShow)
	m.HandleFunc("POST "+p+"/dlq/{id}/redrive", c.action(c.dlqOne("redrive")))
	m.HandleFunc("POST "+p+"/dlq/{id}/discard", c.action(c.dlqOne("discard")))
	m.HandleFunc("POST "+p+"/dlq/{id}/revise", c.action(c.dlqRevise))
	m.HandleFunc("GET "+p+"/held", c.page("held", "Held work", c.heldData))
	m.HandleFunc("POST "+p+"/held/{what}/{verb}", c.action(c.heldAct))
	m.HandleFunc("GET "+p+"/keys", c.keys)
	m.HandleFunc("POST "+p+"/keys/forget", c.action(c.keyForget))
	m.HandleFunc("GET "+p+"/outbox", c.page("outbox", "Outbox", c.outboxData))
	m.HandleFunc("POST "+p+"/outbox/{seq}/{verb}", c.action(c.outboxAct))
	m.HandleFunc("GET "+p+"/audit", c.auditList)
	m.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, http.StatusNotFound, "Not found", "no such console page")
	})
	open.Handle(p+"/", c.requireAuth(m))

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, http.StatusForbidden, "Cross-origin request refused",
			"state-changing requests must come from the console's own pages")
	}))
	return securityHeaders(cop.Handler(open))
}

// securityHeaders sets headers that keep the pages from being framed,
// sniffed or made to load anything from elsewhere.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "+
			"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func (c *Console[TTx]) assetHandler() http.Handler {
	fsrv := http.FileServerFS(c.assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fsrv.ServeHTTP(w, r)
	})
}

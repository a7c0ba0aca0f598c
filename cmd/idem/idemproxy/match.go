package idemproxy

import (
	"context"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/checks"
)

// routeEntry is one configured route as the proxy serves it.
type routeEntry struct {
	h     http.Handler
	exact bool // Route.ExactPath: no path variants
}

// variants matches the spellings of the routes' paths that an upstream
// may read as the route although http.ServeMux does not: another letter
// case, a trailing slash, matrix parameters (";x=1") and encoded slashes
// ("%2F"). Its patterns are the routes' patterns with their literal
// segments in lower case, plus "PATH/{$}" for a route whose path does not
// end in a slash; requests are matched by their normalised path
// (variantPath). Routes with ExactPath are not in it.
type variants struct {
	mux     *http.ServeMux
	entries map[string]*routeEntry // by pattern in mux
}

func newVariants() *variants {
	return &variants{mux: http.NewServeMux(), entries: map[string]*routeEntry{}}
}

// add registers the variants of rt's path. slash adds the trailing-slash
// form; New adds it after every route's main form, and not when another
// route already names that form.
func (v *variants) add(rt Route, e *routeEntry, slash bool) error {
	lp := lowerLiterals(rt.Path)
	if slash {
		if strings.HasSuffix(lp, "/") || strings.HasSuffix(lp, "}") {
			return nil // a subtree, {$} or {name...}: already takes the slash
		}
		for _, taken := range []string{lp + "/", lp + "/{$}"} {
			if v.entries[withMethod(rt.Method, taken)] != nil || v.entries[taken] != nil {
				return nil
			}
		}
		lp += "/{$}"
	}
	pat := withMethod(rt.Method, lp)
	if err := register(v.mux, pat, http.NotFoundHandler()); err != nil {
		return checks.Optionf("idemproxy: route %q: its path variants (%s) overlap another route's: give one of them exact path matching (%v)",
			rt.pattern(), pat, err)
	}
	v.entries[pat] = e
	return nil
}

// match returns the route whose path variant r's path is, or nil.
func (v *variants) match(r *http.Request) *routeEntry {
	u := *r.URL
	u.Path, u.RawPath = variantPath(r.URL.Path), ""
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = &u
	_, pat := v.mux.Handler(r2)
	return v.entries[pat]
}

func withMethod(method, path string) string {
	if method == "" {
		return path
	}
	return method + " " + path
}

// lowerLiterals lower-cases the literal segments of a ServeMux path
// pattern, keeping its wildcards ("{id}") as written.
func lowerLiterals(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			segs[i] = strings.ToLower(s)
		}
	}
	return strings.Join(segs, "/")
}

// variantPath is the normalised form of a decoded request path under which
// it is matched against the variants: matrix parameters (from ";" to the
// end of a segment) removed, lower case, cleaned as ServeMux cleans (dot
// segments and repeated slashes removed, a trailing slash kept). Encoded
// slashes were decoded into the path already, so they separate segments.
func variantPath(p string) string {
	if strings.IndexByte(p, ';') >= 0 {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j]
			}
		}
		p = strings.Join(segs, "/")
	}
	return cleanPath(strings.ToLower(p))
}

// hopByHop are the headers a proxy never forwards whatever Connection
// says (RFC 9110 §7.6.1, and the ones httputil.ReverseProxy drops).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func isHopByHop(name string) bool {
	return slices.Contains(hopByHop, textproto.CanonicalMIMEHeaderKey(name))
}

type scopeHeadersKey struct{}

// withScopeHeaders records in each request's context the headers the
// route scopes, authenticates and fingerprints it by, so that they reach
// the upstream whatever the client's Connection header names
// (keepScopeHeaders).
func withScopeHeaders(names []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), scopeHeadersKey{}, names)))
	})
}

// keepScopeHeaders puts back into out the scope headers of in that the
// reverse proxy removed as hop-by-hop because Connection named them: the
// upstream sees them as the proxy read them.
func keepScopeHeaders(in *http.Request, out http.Header) {
	names, _ := in.Context().Value(scopeHeadersKey{}).([]string)
	for _, name := range names {
		if vs := in.Header.Values(name); len(vs) > 0 {
			out[textproto.CanonicalMIMEHeaderKey(name)] = slices.Clone(vs)
		}
	}
}

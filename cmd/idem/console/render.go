package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/outbox"
)

// parsePages parses every templates/page_*.html together with the layout.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(embedded, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(embedded, "templates/page_*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		t, err := template.Must(base.Clone()).ParseFS(embedded, n)
		if err != nil {
			return nil, err
		}
		key := strings.TrimSuffix(strings.TrimPrefix(n, "templates/page_"), ".html")
		out[key] = t
	}
	return out, nil
}

// page is what every template gets.
type page struct {
	Title    string
	Prefix   string
	Actor    string
	ReadOnly bool
	Nav      string // the current section
	Done     string // the outcome of the last action, from a fixed list
	Data     any
}

// render executes page name with data; a template error answers 500.
func (c *Console[TTx]) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "console: no page "+name, http.StatusInternalServerError)
		return
	}
	p := page{Title: title, Prefix: c.cfg.Prefix, Actor: actor(r.Context()), ReadOnly: c.cfg.ReadOnly, Nav: name,
		Done: doneMessage(r.URL.Query()), Data: data}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.ErrorContext(r.Context(), "console: render", "page", name, "error", err)
		http.Error(w, "console: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// page serves page name, titled title, with the data build gathers for
// the request; an error of build answers the error page (500) instead.
func (c *Console[TTx]) page(name, title string, build func(r *http.Request) (map[string]any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := build(r)
		if err != nil {
			c.renderError(w, r, http.StatusInternalServerError, title, err.Error())
			return
		}
		c.render(w, r, http.StatusOK, name, title, data)
	}
}

func (c *Console[TTx]) renderError(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	c.render(w, r, status, "error", title, map[string]any{"Status": status, "Detail": detail})
}

// doneMessages are the fixed messages of the ?done= codes ("bulk" is
// formatted with ?n= by doneMessage).
var doneMessages = map[string]string{
	"redriven":  "Dead letter redriven.",
	"discarded": "Dead letter discarded.",
	"revised":   "Edited copy published as a new revision; the original letter is resolved.",
	"resolved":  "Resolved as completed.",
	"released":  "Released for re-execution.",
	"forgotten": "Key forgotten: the next request with it executes as new.",
	"retried":   "Outbox event back to pending: the relay publishes it next.",
	"dropped":   "Parked outbox event discarded.",
}

// doneMessage turns the ?done= code of a redirect after an action into a
// fixed message, so that a crafted link can never put text on the page.
func doneMessage(q url.Values) string {
	switch code := q.Get("done"); code {
	case "":
		return ""
	case "bulk":
		n, _ := strconv.Atoi(q.Get("n"))
		return fmt.Sprintf("Bulk action done on %d letter(s).", n)
	default:
		return doneMessages[code]
	}
}

var funcs = template.FuncMap{
	"v":       visible,
	"time":    fmtTime,
	"ago":     ago,
	"pretty":  pretty,
	"headers": sortedHeaders,
	"dur":     fmtDur,
	"trunc":   truncate,
	"list":    func(s ...string) []string { return s },
	"len64":   func(v []outbox.Event) int64 { return int64(len(v)) },
	"dict":    dict,
}

// dict makes a map of alternate names and values, to hand a {{define}}d
// template more than one value.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: %d arguments, want name/value pairs", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: name %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// visible renders s as text a terminal or a browser cannot be tricked by:
// invalid UTF-8 becomes U+FFFD and control characters (ANSI escape
// sequences included) are written as \xNN escapes; newlines and tabs stay.
// html/template escapes the result for HTML.
func visible(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune('\uFFFD')
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0, r == '\u2028', r == '\u2029', r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			fmt.Fprintf(&b, `\u%04x`, r) // C1 controls and bidi overrides
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// pretty renders a payload for reading: JSON indented, other UTF-8 text as
// is, anything else as a hex dump; all through visible.
func pretty(p []byte) string {
	if len(p) == 0 {
		return "(empty)"
	}
	if json.Valid(p) {
		var buf bytes.Buffer
		if json.Indent(&buf, p, "", "  ") == nil {
			return visible(buf.String())
		}
	}
	if utf8.Valid(p) {
		return visible(string(p))
	}
	return fmt.Sprintf("(%d bytes, not UTF-8)\n%s", len(p), hex.Dump(p))
}

// editable is the payload as prefilled in the edit form (JSON indented,
// else the raw text); false for payloads that are not UTF-8 or hold control
// characters, which a text field would not carry back byte for byte.
func editable(p []byte) (string, bool) {
	if !utf8.Valid(p) || visible(string(p)) != string(p) {
		return "", false
	}
	if json.Valid(p) {
		var buf bytes.Buffer
		if json.Indent(&buf, p, "", "  ") == nil {
			return buf.String(), true
		}
	}
	return string(p), true
}

// header is one header for display.
type header struct{ Name, Value string }

// secretHeader reports header names whose values are never shown.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"authorization", "cookie", "token", "secret", "password", "passwd", "api-key", "apikey", "signature", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// sortedHeaders sorts headers by name and masks secret-looking values.
func sortedHeaders(h any) []header {
	var out []header
	switch m := h.(type) {
	case map[string]string:
		for k, v := range m {
			out = append(out, header{k, v})
		}
	case http.Header:
		for k, vs := range m {
			out = append(out, header{k, strings.Join(vs, ", ")})
		}
	}
	for i := range out {
		if secretHeader(out[i].Name) {
			out[i].Value = "(hidden)"
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmtDur(now.Sub(t)) + " ago"
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + fmtDur(-d)
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

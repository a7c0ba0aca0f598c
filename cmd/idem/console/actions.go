package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkit/idem/internal/audit"
)

// maxForm bounds a form body (an edited payload included).
const maxForm = 4 << 20

// action wraps a state-changing handler: refused in read-only mode, form
// parsed (bounded), errors rendered with their status. The cross-origin
// check and the token check ran before.
func (c *Console[TTx]) action(fn func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.ReadOnly {
			c.renderError(w, r, http.StatusForbidden, "Read-only", errReadOnly.Error())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			c.renderError(w, r, http.StatusBadRequest, "Bad request", "the form could not be read (at most 4 MiB)")
			return
		}
		if err := fn(w, r); err != nil {
			c.renderError(w, r, statusOf(err), "Action failed", err.Error())
		}
	}
}

// audited runs act between two audit-log writes: the entry is recorded
// (outcome "started") before act runs, and act does not run if that fails;
// afterwards the outcome and act's extra details are recorded.
func (c *Console[TTx]) audited(r *http.Request, action, target, reason, details string, act func() (string, error)) error {
	ctx := r.Context()
	who := actor(ctx)
	err := audit.Run(ctx, c.d, c.now, who, action, target, reason, details, act)
	if err != nil {
		c.log.WarnContext(ctx, "console action failed", "actor", who, "action", action, "target", target, "error", err)
	} else {
		c.log.InfoContext(ctx, "console action", "actor", who, "action", action, "target", target, "reason", reason)
	}
	return err
}

// reason reads the form's reason; required ones must not be blank.
func reason(r *http.Request, required bool) (string, error) {
	s := strings.TrimSpace(r.PostForm.Get("reason"))
	if required && s == "" {
		return "", badForm("a reason is required for this action")
	}
	return s, nil
}

// formText is the form's text field name with the browser's CRLF line
// ends turned into LF.
func formText(r *http.Request, name string) []byte {
	return []byte(strings.ReplaceAll(r.PostForm.Get(name), "\r\n", "\n"))
}

// done redirects (303) to path with the outcome code of the action.
func (c *Console[TTx]) done(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	http.Redirect(w, r, c.path(path)+"?"+q.Encode(), http.StatusSeeOther)
}

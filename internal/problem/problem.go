// Package problem writes RFC 9457 problem details
// (application/problem+json): the one writer behind idemhttp, idemproxy,
// webhook, the console and the reference system's errors.
package problem

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Details is a plain problem document for callers without their own type.
type Details struct {
	Type   string `json:"type,omitempty"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Write sends doc (a struct with RFC 9457 fields, e.g. [Details]) as
// application/problem+json with status, Cache-Control: no-store and, when
// retryAfter is positive, Retry-After in whole seconds rounded up.
func Write(w http.ResponseWriter, status int, doc any, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
	}
	body, err := json.Marshal(doc)
	if err != nil {
		body, _ = json.Marshal(Details{Title: http.StatusText(status), Status: status})
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

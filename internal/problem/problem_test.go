package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/problem"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	problem.Write(rec, http.StatusConflict, problem.Details{Type: "urn:x", Title: "busy", Status: http.StatusConflict}, 1500*time.Millisecond)
	if rec.Code != http.StatusConflict {
		t.Fatalf("status %d", rec.Code)
	}
	h := rec.Header()
	if h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" || h.Get("Retry-After") != "2" {
		t.Fatalf("headers %v (Retry-After rounds 1.5s up to 2)", h)
	}
	var got problem.Details
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Title != "busy" || got.Type != "urn:x" || got.Status != 409 {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}

	rec = httptest.NewRecorder()
	problem.Write(rec, http.StatusBadRequest, map[string]any{"bad": func() {}}, 0)
	if rec.Header().Get("Retry-After") != "" {
		t.Fatal("Retry-After without a delay")
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Status != 400 || got.Title != "Bad Request" {
		t.Fatalf("a document that does not marshal must still answer a problem: %q", rec.Body.String())
	}
}

package httpserver

import "net/http"

// StatusWriter remembers the status a handler writes through it (200 when
// the handler writes a body without WriteHeader). Unwrap lets
// http.ResponseController reach the connection's writer.
type StatusWriter struct {
	http.ResponseWriter
	// Status is the first status written, 0 before anything was.
	Status int
}

// WriteHeader records code and passes it on.
func (s *StatusWriter) WriteHeader(code int) {
	if s.Status == 0 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write records 200 when nothing was written before and passes b on.
func (s *StatusWriter) Write(b []byte) (int, error) {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer.
func (s *StatusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

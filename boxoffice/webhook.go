package boxoffice

import "net/http"

func (s *System) webhookHandler() (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusServiceUnavailable, ProblemInternal, "not yet", "")
	}), nil
}

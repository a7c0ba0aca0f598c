// Package httpserver builds the http.Server every server idem starts uses
// (the demo, the fake provider, benchmarks, the drill), so each one bounds
// how long a client may take to send headers and body, how long a response
// may take, and how long an idle connection is kept. A client that trickles
// its body one byte at a time is cut off after ReadTimeout.
package httpserver

import (
	"net/http"
	"time"
)

// The limits every server idem starts applies.
const (
	// ReadHeaderTimeout bounds the time to read a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds the time to read a whole request, body included.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds the time from the end of the request headers to
	// the end of the response.
	WriteTimeout = 60 * time.Second
	// IdleTimeout bounds how long a keep-alive connection waits for the
	// next request.
	IdleTimeout = 120 * time.Second
)

// New returns a server for h with idem's timeouts set.
func New(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
	}
}

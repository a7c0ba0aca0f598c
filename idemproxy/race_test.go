//go:build race

package idemproxy_test

const raceEnabled = true

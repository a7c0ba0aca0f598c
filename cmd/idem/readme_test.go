package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// readmeCommand is one idem command line found in a README sh block.
type readmeCommand struct {
	line int      // the README line it starts on
	args []string // the arguments after "idem"
}

// TestREADMECommandsParse runs every idem command of the README's sh blocks
// (as "go run ./cmd/idem …" or "idem …") through the command's own flag
// parsing and validation, with Env.CheckOnly so nothing is opened or
// started: a README command that does not parse as written fails here.
func TestREADMECommandsParse(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := readmeCommands(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	// The README documents the drill, the demo, webhook signing, the console,
	// the proxy, conform and migrate: far more than ten command lines. Fewer
	// means the extraction broke, and the test would check nothing.
	if len(cmds) < 10 {
		t.Fatalf("found %d idem commands in README.md's sh blocks, want at least 10: %+v", len(cmds), cmds)
	}
	for _, c := range cmds {
		t.Run(fmt.Sprintf("line%d", c.line), func(t *testing.T) {
			for _, a := range c.args {
				if strings.Contains(a, "$") {
					t.Fatalf("README.md:%d: %q depends on the shell's environment; a README command runs as written", c.line, a)
				}
			}
			if code, out := checkCommandLine(c.args); code != 0 {
				t.Errorf("README.md:%d: idem %s\nexit status %d, want 0:\n%s", c.line, strings.Join(c.args, " "), code, out)
			}
		})
	}
}

// TestREADMECheckCatchesABadCommand shows the check above can fail: the
// bracketed notation an earlier README had in a copyable block exits 2.
func TestREADMECheckCatchesABadCommand(t *testing.T) {
	t.Parallel()
	cmds, err := readmeCommands("```sh\ngo run ./cmd/idem drill --broker kafka [--processes]   # note\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 1 {
		t.Fatalf("commands = %+v, want one", cmds)
	}
	code, out := checkCommandLine(cmds[0].args)
	if code != 2 || !strings.Contains(out, `unexpected arguments ["[--processes]"]`) {
		t.Fatalf("exit %d, output %q; want 2 and the unexpected argument named", code, out)
	}
	for _, bad := range [][]string{{"drill", "--no-such-flag"}, {"dlq", "redrive"}, {"migrate", "sideways"}, {"drill", "--scenario", "no-such"}} {
		if code, out := checkCommandLine(bad); code != 2 {
			t.Errorf("idem %s: exit %d (%s), want 2", strings.Join(bad, " "), code, out)
		}
	}
}

// checkCommandLine runs args with CheckOnly and returns the exit status and
// what the command printed.
func checkCommandLine(args []string) (int, string) {
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }, CheckOnly: true}
	return run(context.Background(), env, args), out.String()
}

// readmeCommands returns the idem command lines of markdown's ```sh blocks:
// lines joined at a trailing backslash, split at the shell's |, &, && and ;,
// and words split as the shell does (quotes, backslashes, # comments).
func readmeCommands(markdown string) ([]readmeCommand, error) {
	var out []readmeCommand
	sc := bufio.NewScanner(strings.NewReader(markdown))
	inSh, n, start := false, 0, 0
	var pending strings.Builder
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inSh = !inSh && strings.TrimSpace(strings.TrimPrefix(line, "```")) == "sh"
			pending.Reset()
			continue
		}
		if !inSh {
			continue
		}
		if pending.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(line, `\`) {
			pending.WriteString(strings.TrimSuffix(line, `\`))
			pending.WriteByte(' ')
			continue
		}
		pending.WriteString(line)
		segments, err := shellSegments(pending.String())
		if errors.Is(err, errUnterminated) {
			pending.WriteByte('\n') // a quote that spans lines
			continue
		}
		pending.Reset()
		if err != nil {
			return nil, fmt.Errorf("README.md:%d: %w", start, err)
		}
		for _, words := range segments {
			switch {
			case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/idem":
				out = append(out, readmeCommand{line: start, args: words[3:]})
			case len(words) >= 1 && words[0] == "idem":
				out = append(out, readmeCommand{line: start, args: words[1:]})
			}
		}
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("README.md:%d: a quote is never closed", start)
	}
	return out, sc.Err()
}

// errUnterminated is a quote still open at the end of the text.
var errUnterminated = errors.New("unterminated")

// shellSegments splits one shell line into commands (at |, &, ; outside
// quotes) and each command into words; a # at the start of a word begins a
// comment. Variables and substitutions are not expanded.
func shellSegments(line string) ([][]string, error) {
	var segs [][]string
	var words []string
	var w strings.Builder
	inWord := false
	flushWord := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	flushSeg := func() {
		flushWord()
		if len(words) > 0 {
			segs = append(segs, words)
			words = nil
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("%w ' in %q", errUnterminated, line)
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				w.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf(`%w " in %q`, errUnterminated, line)
			}
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case c == '#' && !inWord:
			flushSeg()
			return segs, nil
		case c == '|' || c == '&' || c == ';':
			flushSeg()
		case c == ' ' || c == '\t' || c == '\n':
			flushWord()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flushSeg()
	return segs, nil
}

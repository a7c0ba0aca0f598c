package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/idemkit/idem/webhook"
)

// maxSignBody bounds the body "idem webhook sign" reads.
const maxSignBody = 64 << 20

// webhookSignSynopsis is the usage line of "idem webhook".
const webhookSignSynopsis = `sign [--secret whsec_…] [--key whsk_…] [--id msg_…] [--timestamp UNIX] [--data BODY|@FILE] [--curl URL]

Computes the Standard Webhooks headers (webhook-id, webhook-timestamp,
webhook-signature) for a body, read from --data or standard input, and
prints them, or with --curl a ready curl command that sends the signed
request. The signature is v1 (HMAC-SHA256) with the secret from --secret or
IDEM_WEBHOOK_SECRET, and/or v1a (Ed25519) with the signing key from --key
or IDEM_WEBHOOK_SIGNING_KEY; neither is ever printed. Receivers accept a
signature for 5 minutes around its timestamp.`

// runWebhook implements "idem webhook sign".
func runWebhook(_ context.Context, env *Env, args []string) error {
	fs := newFlags(env, "webhook", webhookSignSynopsis)
	secret := fs.String("secret", "", "Standard Webhooks secret whsec_<base64> for a v1 signature (default $IDEM_WEBHOOK_SECRET)")
	key := fs.String("key", "", "Standard Webhooks Ed25519 signing key whsk_<base64> for a v1a signature (default $IDEM_WEBHOOK_SIGNING_KEY)")
	id := fs.String("id", "", "webhook-id, the delivery id the receiver deduplicates on (default: a new random msg_…)")
	timestamp := fs.Int64("timestamp", 0, "webhook-timestamp in Unix seconds (default: now)")
	data := fs.String("data", "", "the body; @FILE reads it from FILE (default: standard input)")
	curl := fs.String("curl", "", "print a curl command that POSTs the signed body to this http(s) URL instead of the headers")
	contentType := fs.String("content-type", "application/json", "Content-Type of the curl command's request")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return fmt.Errorf("%w: missing action (sign; run 'idem webhook -h')", errUsage)
	case fs.Arg(0) != "sign":
		return fmt.Errorf("%w: unknown action %q (want sign)", errUsage, fs.Arg(0))
	case fs.NArg() > 1:
		return fmt.Errorf("%w: unexpected argument %q (the body goes in --data or on standard input)", errUsage, fs.Arg(1))
	}
	if *secret == "" {
		*secret = env.Getenv("IDEM_WEBHOOK_SECRET")
	}
	if *key == "" {
		*key = env.Getenv("IDEM_WEBHOOK_SIGNING_KEY")
	}
	var cfg webhook.StandardConfig
	if *secret != "" {
		if _, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{*secret}}); err != nil {
			return fmt.Errorf("%w: --secret is not a Standard Webhooks secret (whsec_ followed by base64)", errUsage)
		}
		cfg.Secrets = []string{*secret}
	}
	if *key != "" {
		if _, err := webhook.NewStandard(webhook.StandardConfig{SigningKeys: []string{*key}}); err != nil {
			return fmt.Errorf("%w: --key is not a Standard Webhooks signing key (whsk_ followed by the base64 of an Ed25519 seed)", errUsage)
		}
		cfg.SigningKeys = []string{*key}
	}
	if len(cfg.Secrets)+len(cfg.SigningKeys) == 0 {
		return fmt.Errorf("%w: nothing to sign with: pass --secret whsec_… (or IDEM_WEBHOOK_SECRET) or --key whsk_… (or IDEM_WEBHOOK_SIGNING_KEY)", errUsage)
	}
	signer, err := webhook.NewStandard(cfg)
	if err != nil {
		return err
	}
	if *id == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		*id = "msg_" + hex.EncodeToString(b)
	}
	if !webhookIDValid(*id) {
		return fmt.Errorf("%w: --id must be 1 to 255 visible ASCII characters without '.'", errUsage)
	}
	ts := time.Now()
	if *timestamp < 0 {
		return fmt.Errorf("%w: --timestamp must be Unix seconds", errUsage)
	}
	if *timestamp > 0 {
		ts = time.Unix(*timestamp, 0)
	}
	if *curl != "" {
		if u, err := url.Parse(*curl); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || termSafe(*curl) != *curl {
			return fmt.Errorf("%w: --curl wants an http:// or https:// URL", errUsage)
		}
		if termSafe(*contentType) != *contentType {
			return fmt.Errorf("%w: --content-type has control characters", errUsage)
		}
	}
	if env.CheckOnly {
		return nil
	}
	dataGiven := false
	fs.Visit(func(f *flag.Flag) { dataGiven = dataGiven || f.Name == "data" })
	body, file, err := signBody(env, *data, dataGiven)
	if err != nil {
		return err
	}
	h := http.Header{}
	if err := signer.Sign(h, webhook.Delivery{ID: *id, Timestamp: ts}, body); err != nil {
		return err
	}
	names := []string{"webhook-id", "webhook-timestamp", "webhook-signature"}
	if *curl == "" {
		for _, n := range names {
			fmt.Fprintf(env.Stdout, "%s: %s\n", n, h.Get(n))
		}
		return nil
	}
	var b strings.Builder
	b.WriteString("curl -i -X POST " + shellQuote(*curl) + " -H " + shellQuote("Content-Type: "+*contentType))
	for _, n := range names {
		b.WriteString(" -H " + shellQuote(n+": "+h.Get(n)))
	}
	switch {
	case file != "":
		b.WriteString(" --data-binary " + shellQuote("@"+file))
	case printable(string(body)):
		b.WriteString(" --data-binary " + shellQuote(string(body)))
	default:
		return fmt.Errorf("%w: the body has control characters or is not UTF-8; pass it with --data @FILE so the curl command can send the file", errUsage)
	}
	fmt.Fprintln(env.Stdout, b.String())
	return nil
}

// signBody returns the body to sign: --data's text, the file named by
// --data @FILE (and that name), or standard input when --data is absent.
func signBody(env *Env, data string, given bool) (body []byte, file string, err error) {
	if given {
		if name, ok := strings.CutPrefix(data, "@"); ok {
			if name == "" {
				return nil, "", fmt.Errorf("%w: --data @ needs a file name", errUsage)
			}
			if termSafe(name) != name {
				return nil, "", fmt.Errorf("%w: --data @FILE: the file name has control characters", errUsage)
			}
			body, err := readBounded(name)
			return body, name, err
		}
		return []byte(data), "", nil
	}
	if env.Stdin == nil {
		return nil, "", nil
	}
	if f, ok := env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return nil, "", fmt.Errorf("%w: no body: pass --data BODY, --data @FILE or pipe it on standard input", errUsage)
	}
	body, err = io.ReadAll(io.LimitReader(env.Stdin, maxSignBody+1))
	if err != nil {
		return nil, "", fmt.Errorf("read standard input: %w", err)
	}
	if len(body) > maxSignBody {
		return nil, "", fmt.Errorf("the body is larger than %d MiB", maxSignBody>>20)
	}
	return body, "", nil
}

func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, maxSignBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxSignBody {
		return nil, fmt.Errorf("%s is larger than %d MiB", name, maxSignBody>>20)
	}
	return body, nil
}

// webhookIDValid reports whether id can be a webhook-id: visible ASCII, no
// '.' (the signed content is "id.timestamp.body").
func webhookIDValid(id string) bool {
	if id == "" || len(id) > 255 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '.' {
			return false
		}
	}
	return true
}

// printable reports whether s is valid UTF-8 that termSafe leaves as it is
// apart from newlines and tabs, so it can be printed inside a shell word.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || (unsafeRune(r) && r != '\n' && r != '\t') {
			return false
		}
	}
	return true
}

// shellQuote quotes s as one POSIX shell word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

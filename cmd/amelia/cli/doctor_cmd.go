package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// doctor writes one line per check: ✓ when it passed, ✗ with a fix when it
// failed; it counts the failures.
type doctor struct {
	w      io.Writer
	failed int
}

func (d *doctor) ok(indent, format string, args ...any) {
	fmt.Fprintf(d.w, "%s✓ %s\n", indent, fmt.Sprintf(format, args...))
}

// note is a line that is neither a pass nor a failure.
func (d *doctor) note(indent, format string, args ...any) {
	fmt.Fprintf(d.w, "%s- %s\n", indent, fmt.Sprintf(format, args...))
}

func (d *doctor) fail(indent, what string, err error, fix string) {
	d.failed++
	line := fmt.Sprintf("%s✗ %s: %s", indent, what, oneLine(err.Error()))
	if fix != "" {
		line += " — " + fix
	}
	fmt.Fprintln(d.w, line)
}

func (a *app) doctorCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that everything amelia run needs is in place, one line per check",
		Long: `Check the config, git, the sandbox workers and, for every profile (or the
one --profile names), that its provider plugin starts and finds nothing wrong
with the profile's settings and network policy, its sandbox is healthy or can
be created, and its LLM key is set.
Exits 1 when a check fails; each failure says how to fix it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := &doctor{w: cmd.OutOrStdout()}
			a.doctor(cmd.Context(), d)
			if d.failed > 0 {
				fmt.Fprintf(d.w, "%d check(s) failed\n", d.failed)
				return exitError{1}
			}
			return nil
		},
	}
}

func (a *app) doctor(ctx context.Context, d *doctor) {
	if git, err := exec.LookPath("git"); err != nil {
		d.fail("", "git", err, "install git (apt-get install git, brew install git)")
	} else {
		d.ok("", "git: %s", git)
	}
	if exe := a.providersExe(); !pluginhost.Executable(exe) {
		d.fail("", "providers", fmt.Errorf("%s, which serves the built-in providers, is missing or not executable", exe), "make build or make install in amelia's clone puts it beside amelia")
	} else {
		d.ok("", "providers: %s", exe)
	}
	arch := runtime.GOARCH
	if w, err := workerbin.Find(workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self), arch); err != nil {
		d.fail("", "worker", err, "")
	} else {
		d.ok("", "worker linux/%s: %s", arch, w)
	}

	c, err := a.loadConfig()
	if err != nil {
		d.fail("", "config", err, "amelia config validate lists every problem")
		return
	}
	names := c.ProfileNames()
	if a.profile != "" {
		p, err := c.Profile(a.profile)
		if err != nil {
			d.fail("", "profile", err, "")
			return
		}
		names = []string{p.Name}
	}
	source := c.Source
	if source == "" {
		source = "none, the built-in default profile"
	}
	d.ok("", "config: %s (%d profile(s))", source, len(c.ProfileNames()))
	host := a.pluginHost()
	for _, name := range names {
		p := c.Profiles[name]
		fmt.Fprintf(d.w, "profile %s:\n", name)
		a.doctorProfile(ctx, d, host, p)
	}
}

func (a *app) doctorProfile(ctx context.Context, d *doctor, host *pluginhost.Host, p *config.Profile) {
	const in = "  "
	if key, err := p.LLMKey(a.lookup); err != nil {
		d.fail(in, "LLM key", err, "to try amelia without one: amelia run --model "+ScriptedPrefix+"echo \"...\"")
	} else {
		checkLLM(ctx, d, in, p.LLM.BaseURL, key, p.LLM.API == config.APIAnthropic)
	}
	if p.LLM.Gemini != nil {
		if key, err := p.GeminiKey(a.lookup); err != nil {
			d.fail(in, "Gemini key", err, "")
		} else {
			checkGemini(ctx, d, in, p.LLM.Gemini.BaseURL, key)
		}
	}
	if _, err := p.GitToken(a.lookup); err != nil {
		d.fail(in, "git token", err, "")
	}
	sb, err := sandbox.Open(ctx, host, p, a.logger)
	if err != nil {
		d.fail(in, "provider "+p.Sandbox.Provider, err, "amelia plugin ls shows the providers amelia can start")
		return
	}
	defer sb.Close()
	d.ok(in, "provider %s started (version %s)", sb.Info.Name, sb.Info.Version)
	// What the provider finds wrong with the profile is a problem of the
	// config, as config validate lists it.
	problems, err := sb.Problems(ctx)
	for _, pr := range problems {
		d.fail(in, "config", errors.New(pr.String()), "")
	}
	switch {
	case errors.Is(err, sandbox.ErrSettingsUnchecked):
		d.note(in, "settings not checked: %v", err)
	case err != nil:
		d.fail(in, "settings", err, "")
	case len(problems) == 0:
		d.ok(in, "settings and network %s checked by provider %s", p.Sandbox.Network, sb.Info.Name)
	}
	if len(problems) > 0 {
		return // the sandbox's state says nothing until they are fixed
	}
	row := a.sandboxState(ctx, sb)
	// What would stop amelia run from starting (or reusing) it: a missing
	// image, a sandbox of the same name that is not this config file's.
	var blocked error
	if row.State == string(sdk.HealthReady) || row.State == "absent" {
		if err := sb.Preflight(ctx); err != nil && !errors.Is(err, sdk.ErrUnsupported) {
			blocked = err
		}
	}
	switch {
	case blocked != nil && row.State == "absent":
		d.fail(in, "sandbox absent, and amelia run could not create it", blocked, "")
	case blocked != nil:
		d.fail(in, "sandbox "+row.State+", but amelia run would refuse it", blocked, "")
	case row.State == string(sdk.HealthReady):
		d.ok(in, "sandbox ready%s", suffix(row.Message))
	case row.State == "absent":
		d.ok(in, "sandbox absent: amelia run creates it")
	case row.State == "not-owned":
		// Another config file's, or another host's: not this one's to fix.
		d.fail(in, "sandbox", errors.New(row.Message), "")
	case row.State == "error":
		// The provider could not tell (its backend is down...): its message
		// says what to check.
		d.fail(in, "sandbox", errors.New(row.Message), "")
	default:
		d.fail(in, "sandbox", errors.New(row.State+suffix(row.Message)), fmt.Sprintf("amelia sandbox down --profile %s recreates it on the next run", p.Name))
	}
}

// llmCheckTimeout bounds doctor's request to an LLM upstream.
const llmCheckTimeout = 10 * time.Second

// checkLLM asks the upstream at baseURL for its models, a request that
// costs nothing, with key: whether it answers, and whether it takes the
// key.
func checkLLM(ctx context.Context, d *doctor, in, baseURL, key string, anthropic bool) {
	h := http.Header{}
	switch {
	case anthropic:
		// Anthropic's API wants its key and version headers.
		h.Set("Anthropic-Version", "2023-06-01")
		if key != "" {
			h.Set("X-Api-Key", key)
		}
	case key != "":
		h.Set("Authorization", "Bearer "+key)
	}
	probeLLM(ctx, d, in, "LLM", "llm.base_url", baseURL, strings.TrimRight(baseURL, "/")+"/models", key, h)
}

// checkGemini is checkLLM for the profile's llm.gemini upstream: Google's
// models list, the key in x-goog-api-key.
func checkGemini(ctx context.Context, d *doctor, in, baseURL, key string) {
	h := http.Header{}
	if key != "" {
		h.Set("X-Goog-Api-Key", key)
	}
	probeLLM(ctx, d, in, "Gemini", "llm.gemini.base_url", baseURL, strings.TrimRight(baseURL, "/")+"/v1beta/models", key, h)
}

// probeLLM gets the models list at modelsURL with header, which carries
// key, and says what came of it for the upstream what at baseURL (the
// profile's key urlKey).
func probeLLM(ctx context.Context, d *doctor, in, what, urlKey, baseURL, modelsURL, key string, header http.Header) {
	ctx, cancel := context.WithTimeout(ctx, llmCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, modelsURL, nil)
	if err != nil {
		d.fail(in, what+" "+baseURL, err, "check "+urlKey)
		return
	}
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // the URL is said already
	}
	if err != nil {
		d.fail(in, what+" "+baseURL, fmt.Errorf("does not answer: %w", err), "check "+urlKey+", and that this machine reaches it")
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	switch {
	// Google answers a key it does not know with 400 and the reason
	// API_KEY_INVALID.
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden ||
		res.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte(`"API_KEY_INVALID"`)):
		// The message may quote the key; it is the user's own, but it
		// is not printed.
		msg := upstreamStatus(res, body)
		if key != "" {
			msg = strings.ReplaceAll(msg, key, "[the key]")
		}
		d.fail(in, what+" key", fmt.Errorf("%s refused it: %s", baseURL, msg), "check the key, and that it is the key of this upstream")
	case res.StatusCode >= 200 && res.StatusCode < 300:
		// OpenAI's and Anthropic's lists are "data", Google's "models".
		var models struct {
			Data   []json.RawMessage `json:"data"`
			Models []json.RawMessage `json:"models"`
		}
		_ = json.Unmarshal(body, &models)
		d.ok(in, "%s %s answers and takes the key (%d model(s))", what, baseURL, len(models.Data)+len(models.Models))
	case res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusMethodNotAllowed:
		d.ok(in, "%s %s answers (it lists no models, so the key is checked at the first request)", what, baseURL)
	default:
		d.fail(in, what+" "+baseURL, errors.New(upstreamStatus(res, body)), "check "+urlKey+"; the upstream may be down")
	}
}

// upstreamStatus is an upstream's answer in one line: its status, and
// the error message an OpenAI-style body carries.
func upstreamStatus(res *http.Response, body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := "HTTP " + res.Status
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg += ": " + oneLine(e.Error.Message)
	}
	return msg
}

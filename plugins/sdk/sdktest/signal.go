package sdktest

import (
	"fmt"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// ruleSignal is the rule about a killed process's exit status, and how to
// keep it, for the failures that show it broken.
const ruleSignal = `rule: a process killed by signal N exits with Code 128+N and Signal its name without "SIG" ("KILL"), and Signal is empty otherwise; ` +
	`fix: take both from the wait status (hostproc does; hostproc.RunWrapped through a wrapper such as nsenter, bwrap or kubectl exec), or for a transport that reports only the code, name the signal you sent when the code is its 128+N (shexec.Signal)`

// linuxSignals are the numbers of the signals by name, as a Linux sandbox
// numbers them (the sandbox, not the host, decides).
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
	"STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
	"URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
	"PWR": 30, "SYS": 31,
}

// signalProblem says what is wrong with st's Signal, or "": when set, it
// must be a signal's name without "SIG", and Code 128 and its number.
func signalProblem(st sdk.ExitStatus) string {
	if st.Signal == "" {
		return ""
	}
	n, ok := linuxSignals[st.Signal]
	switch {
	case strings.HasPrefix(st.Signal, "SIG"):
		return fmt.Sprintf("Signal %q has the \"SIG\" prefix, want %q", st.Signal, strings.TrimPrefix(st.Signal, "SIG"))
	case !ok:
		return fmt.Sprintf("Signal %q is no signal's name (as in \"KILL\" or \"TERM\")", st.Signal)
	case st.Code != 128+n:
		return fmt.Sprintf("Signal %q with Code %d, want Code %d (128+%d)", st.Signal, st.Code, 128+n, n)
	}
	return ""
}

// checkSignal fails t when st's Signal is wrong, naming the rule.
func checkSignal(t T, what string, st sdk.ExitStatus) {
	t.Helper()
	if p := signalProblem(st); p != "" {
		t.Errorf("%s: exit %+v: %s; %s", what, st, p, ruleSignal)
	}
}

// killedBySignal: a command that kills itself with a signal is reported
// killed by it. A transport that sees only the exit code (128+N) may
// leave Signal empty; a Signal it does set must be that signal's.
func (k *kit) killedBySignal(t T) {
	for _, tc := range []struct {
		sig  string
		code int
	}{{"USR1", 138}, {"KILL", 137}} {
		r := k.run(k.ctx(t), t, sh("kill -"+tc.sig+" $$; sleep 60"), nil)
		wrongName := r.st.Signal != "" && r.st.Signal != tc.sig && signalProblem(r.st) == "" // else k.run said it
		if r.st.Code != tc.code || wrongName || r.st.Canceled || r.st.TimedOut {
			t.Errorf("sh killed by SIG%s: exit %+v, want Code %d and Signal %q (or \"\" where the transport reports only the code); %s",
				tc.sig, r.st, tc.code, tc.sig, ruleSignal)
		}
	}
}

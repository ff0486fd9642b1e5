package runview

import (
	"strconv"
	"strings"
)

// labelWidth is the width of the label column of the summary box.
const labelWidth = 10

// maxDiffFiles is how many per-file lines of the diff stat the box shows;
// the totals line always comes last.
const maxDiffFiles = 8

// boxRow is one row of the summary box: a label (on the first line of a
// value only) and its text, plain, with the style to paint it in.
type boxRow struct {
	label, text, sgr string
}

// box lays out the summary as a box as wide as its content, at most the
// width of the terminal:
//
//	╭─ ✓ done ──────────────────────────────────────╮
//	│ branch    amelia/fix-login-3f9a               │
//	│ changes   main.go | 2 +-                      │
//	│           1 file changed, 1 insertion(+), ... │
//	│ last cmd  the agent's last command failed     │
//	│           (exit 127, command not found): make │
//	│ tokens    12,345 in · 2,345 out               │
//	│ wall      1m1s                                │
//	│ cleaned   worktree, tunnel, plugin, proxy     │
//	│ left      sandbox dev (running; amelia stop   │
//	│           --profile dev removes it)           │
//	╰───────────────────────────────────────────────╯
func (v *ttyView) box(s Summary) []string {
	avail := max(v.cols()-4-labelWidth, 10) // for the text of a row
	var rows []boxRow
	add := func(label, text, sgr string) {
		rows = append(rows, boxRow{label, truncate(text, avail), sgr})
	}
	if s.Workflow != "" {
		add("workflow", oneLine(s.Workflow), "")
	}
	if s.Branch != "" {
		b := oneLine(s.Branch)
		if s.Pushed {
			b += " (pushed)"
		}
		add("branch", b, "")
		if strings.TrimSpace(s.DiffStat) == "" {
			add("changes", "none", "")
		}
	}
	for i, l := range diffStatLines(s.DiffStat) {
		add(label(i, "changes"), l, "")
	}
	if f := v.cmds.reported(s); f != nil {
		text := "the agent's last command failed (" + f.describe() + "): " + oneLine(f.command)
		for i, l := range wrap(sanitize(text), avail) {
			add(label(i, "last cmd"), l, sgrYellow)
		}
	}
	if u := s.Usage; u != nil {
		if u.InputTokens != nil || u.OutputTokens != nil {
			t := count(u.InputTokens) + " in · " + count(u.OutputTokens) + " out"
			if u.CacheReadTokens != nil && *u.CacheReadTokens > 0 {
				t += " · " + formatCount(*u.CacheReadTokens) + " cached"
			}
			add("tokens", t, "")
		}
		if u.CostUSD != nil {
			add("cost", formatCost(*u.CostUSD), "")
		}
		if u.NumTurns != nil {
			add("turns", strconv.FormatInt(*u.NumTurns, 10), "")
		}
	}
	add("wall", formatDuration(s.Wall), "")
	// An interrupted run has no error to show: it is what the user asked.
	stopped := interrupted(s.Err)
	if s.Err != nil && !stopped {
		for i, l := range wrap(sanitize(s.Err.Error()), avail) {
			add(label(i, "error"), l, sgrRed)
		}
	}
	if len(s.Cleaned) > 0 {
		cleaned := make([]string, len(s.Cleaned))
		for i, c := range s.Cleaned {
			cleaned[i] = oneLine(c)
		}
		for i, l := range wrap(strings.Join(cleaned, ", "), avail) {
			add(label(i, "cleaned"), l, "")
		}
	}
	n := 0
	for _, left := range s.Left {
		for _, l := range wrap(oneLine(left), avail) {
			add(label(n, "left"), l, "")
			n++
		}
	}
	if k := s.Kept; k != nil {
		add("kept", oneLine(k.Branch)+" in sandbox "+oneLine(k.Sandbox), sgrYellow)
		add("recover", oneLine(k.Recover), "")
	}

	title, titleSGR := markDone+" done", sgrGreen
	switch {
	case stopped:
		title, titleSGR = markInterrupted+" interrupted", sgrYellow
	case s.Err != nil:
		title, titleSGR = markFailed+" failed", sgrRed
	}
	inner := textWidth(title) + 2
	for _, r := range rows {
		inner = max(inner, labelWidth+textWidth(r.text))
	}
	out := []string{"╭─ " + v.paint(titleSGR, title) + " " + strings.Repeat("─", inner-1-textWidth(title)) + "╮"}
	for _, r := range rows {
		pad := strings.Repeat(" ", inner-labelWidth-textWidth(r.text))
		out = append(out, "│ "+pad2(r.label)+v.paint(r.sgr, r.text)+pad+" │")
	}
	return append(out, "╰"+strings.Repeat("─", inner+2)+"╯")
}

// label is name on the first line of a value, and blank below it.
func label(i int, name string) string {
	if i > 0 {
		return ""
	}
	return name
}

// pad2 pads a label to the label column.
func pad2(label string) string {
	return label + strings.Repeat(" ", labelWidth-len(label))
}

// count formats a token count that may be unknown.
func count(n *int64) string {
	if n == nil {
		return "?"
	}
	return formatCount(*n)
}

// diffStatLines are the lines of `git diff --stat` to show: the first
// maxDiffFiles files, a line for the rest, and the totals line.
func diffStatLines(stat string) []string {
	var lines []string
	for l := range strings.SplitSeq(sanitize(stat), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) <= maxDiffFiles+1 {
		return lines
	}
	files, total := lines[:len(lines)-1], lines[len(lines)-1]
	more := len(files) - maxDiffFiles
	return append(files[:maxDiffFiles:maxDiffFiles], "… and "+strconv.Itoa(more)+" more files", total)
}

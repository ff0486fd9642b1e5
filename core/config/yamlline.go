package config

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// blockError matches the YAML errors reported at the line where the block
// holding the mistake began ("line 2: did not find expected key" for a
// badly indented key on line 8), rather than at the mistake.
var blockError = regexp.MustCompile(`^yaml: line (\d+): (did not find expected (?:key|'-' indicator))$`)

// mistakeScan bounds how many lines after the reported one are tried.
const mistakeScan = 500

// locateMistake rewrites a block error to name the line the mistake is on:
// the first line after the block's start at which the document, read up
// to there, fails with the same error. A prefix that fails otherwise (it
// ends inside a flow map or a quoted string running over several lines)
// is no such line. Other errors are returned as they are.
func locateMistake(b []byte, err error) error {
	m := blockError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	start, _ := strconv.Atoi(m[1])
	lines := bytes.SplitAfter(b, []byte("\n"))
	end := 0 // the prefix's length, through line k
	for k := 1; k <= len(lines) && k <= start+mistakeScan; k++ {
		end += len(lines[k-1])
		if k <= start || len(bytes.TrimSpace(lines[k-1])) == 0 {
			continue // a blank line is no mistake
		}
		var n yaml.Node
		if perr := yaml.Unmarshal(b[:end], &n); perr != nil && perr.Error() == err.Error() {
			return fmt.Errorf("yaml: line %d: %s in the block that starts at line %d (check the indentation of line %d)", k, m[2], start, k)
		}
	}
	return err
}

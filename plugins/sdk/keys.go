package sdk

import (
	"strconv"
	"strings"
)

// closest returns the candidate nearest to s by edit distance when it is
// close enough to be a likely typo of it ("memroy" for "memory"), or "".
// It is the did-you-mean of every unknown key Amelia reports: the
// profile's own keys and those of a provider's settings block.
func closest(s string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), c)
		if d < bestDist && d <= len(c)/2 {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// JoinKey appends key to the key path at, as a profile's author reads
// paths: dot-separated ("resources.memory"), a key quoted when it holds a
// dot, a bracket, a quote or a space ("labels.\"com.example.team\"").
// List items are written at + "[2]".
func JoinKey(at, key string) string {
	if needsQuote(key) {
		key = strconv.Quote(key)
	}
	if at == "" {
		return key
	}
	return at + "." + key
}

func needsQuote(k string) bool {
	if k == "" {
		return true
	}
	for _, r := range k {
		if r == '.' || r == '[' || r == ']' || r == '"' || r == '\'' || r <= ' ' || r == 0x7f {
			return true
		}
	}
	return false
}

// UnknownKeyMessage says that key is not one of known, suggesting the
// one it is likely a typo of (closest): "unknown key, did you mean memory?
// (known: cpus, memory, pids)". A hint, when not empty, ends the list of
// known keys ("or a map of provider settings"). It is the wording of
// every unknown key Amelia reports, in a profile and in a provider's
// settings block.
func UnknownKeyMessage(key string, known []string, hint string) string {
	list := strings.Join(known, ", ")
	if hint != "" {
		list += ", " + hint
	}
	if c := closest(key, known); c != "" {
		return "unknown key, did you mean " + c + "? (known: " + list + ")"
	}
	return "unknown key (known: " + list + ")"
}

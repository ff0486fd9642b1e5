package workspace

// BuildOutputs are the well-known build and cache outputs a workflow's
// checkout ignores by default (Options.Ignore): what running a project's
// tests or installing its dependencies leaves behind, which no one means
// to commit. They are git ignore patterns, written to the checkout's
// .git/info/exclude, so they keep untracked files out of the agent's own
// commits and of CommitAll's alike, and never touch a path the repository
// tracks, nor one its own .gitignore brings back with "!". Names a project
// may use for its sources (build/, dist/, target/, out/) are not among
// them: a repository that ignores those says so in its .gitignore.
func BuildOutputs() []string {
	return []string{
		// Python
		"__pycache__/", "*.py[cod]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
		".tox/", ".nox/", ".venv/", ".coverage", ".hypothesis/",
		// JavaScript
		"node_modules/",
		// Gradle; tools' caches under the project
		".gradle/", ".cache/",
	}
}

// AgentState are the files CLI agents keep of their own in the
// directory they work in, which a workflow's checkout always ignores:
// amelia points their state elsewhere, and these patterns keep on the
// host whatever an agent writes there all the same.
func AgentState() []string {
	return []string{
		// opencode's database and logs (its data.directory)
		".opencode/",
		// Claude Code's own approvals, when it is asked
		".claude/settings.local.json",
	}
}

// excludeFile is the content of a checkout's .git/info/exclude for
// patterns: a comment saying where they come from, then one a line.
func excludeFile(patterns []string) string {
	if len(patterns) == 0 {
		return ""
	}
	s := "# amelia: agents' state, and build and cache outputs, left out of the\n" +
		"# workflow's commits (commit_build_outputs: true keeps the outputs)\n"
	for _, p := range patterns {
		s += p + "\n"
	}
	return s
}

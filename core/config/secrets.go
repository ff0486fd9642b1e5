package config

import (
	"errors"
	"fmt"
)

// The keys and tokens a run needs are resolved by the host when the run
// starts, from the host's environment: never earlier (a profile can be
// shown or validated without them), never inside the sandbox. Errors name
// the profile, the key and the fix, and never contain a secret.

// LLMKey returns the key for the profile's llm upstream: llm.api_key as
// written, or the value of the variable llm.api_key_env names, which must
// be set and not empty. An explicitly empty llm.api_key is "no key" (a
// keyless local server): "" and no error.
//
// lookupEnv reads the host environment (os.LookupEnv); nil means the
// environment the profile was loaded with.
func (p *Profile) LLMKey(lookupEnv func(string) (string, bool)) (string, error) {
	return p.secret(lookupEnv, "llm.api_key", p.LLM.APIKeyEnv, p.LLM.APIKey, "export it, or set llm.api_key")
}

// AnthropicKey is LLMKey for llm.anthropic. It returns "" and no error
// when the profile has no llm.anthropic block.
func (p *Profile) AnthropicKey(lookupEnv func(string) (string, bool)) (string, error) {
	if p.LLM.Anthropic == nil {
		return "", nil
	}
	a := p.LLM.Anthropic
	return p.secret(lookupEnv, "llm.anthropic.api_key", a.APIKeyEnv, a.APIKey, "export it, or set llm.anthropic.api_key")
}

// GeminiKey is LLMKey for llm.gemini. It returns "" and no error when
// the profile has no llm.gemini block.
func (p *Profile) GeminiKey(lookupEnv func(string) (string, bool)) (string, error) {
	if p.LLM.Gemini == nil {
		return "", nil
	}
	g := p.LLM.Gemini
	return p.secret(lookupEnv, "llm.gemini.api_key", g.APIKeyEnv, g.APIKey, "export it, or set llm.gemini.api_key")
}

// GitToken returns the token the proxy gives git: git.token as written,
// or the value of the variable git.token_env names, which must be set and
// not empty. With neither it returns "" and no error: the host's own
// credential store answers.
func (p *Profile) GitToken(lookupEnv func(string) (string, bool)) (string, error) {
	return p.secret(lookupEnv, "git.token", p.Git.TokenEnv, p.Git.Token,
		"export it, set git.token, or remove git.token_env to use the host's git credentials")
}

// secret resolves a secret written literally under key, or held by the
// variable envName names under key+"_env" (which wins when set). A name
// that came from a ${VAR} is written as written in its errors, as every
// such value is (see Redact).
func (p *Profile) secret(lookupEnv func(string) (string, bool), key, envName, literal, fix string) (string, error) {
	v, err := p.resolve(lookupEnv, key, envName, literal, fix)
	if err != nil {
		return "", errors.New(p.Redact(err.Error()))
	}
	return v, nil
}

func (p *Profile) resolve(lookupEnv func(string) (string, bool), key, envName, literal, fix string) (string, error) {
	if envName == "" {
		if hasLineBreak(literal) {
			return "", fmt.Errorf("profile %s: %s: contains a line break or NUL, which cannot be sent", p.Name, key)
		}
		return literal, nil
	}
	if lookupEnv == nil {
		lookupEnv = p.lookupEnv
	}
	v, ok := "", false
	if lookupEnv != nil {
		v, ok = lookupEnv(envName)
	}
	envKey := key + "_env"
	switch {
	case !ok:
		return "", fmt.Errorf("profile %s: %s: %s is not set in this environment (%s)", p.Name, envKey, envName, fix)
	case v == "":
		return "", fmt.Errorf("profile %s: %s: %s is set but empty in this environment (%s)", p.Name, envKey, envName, fix)
	case hasLineBreak(v):
		return "", fmt.Errorf("profile %s: %s: the value of %s contains a line break or NUL, which cannot be sent (export it without one)", p.Name, envKey, envName)
	}
	return v, nil
}

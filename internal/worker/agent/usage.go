package agent

import (
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// tally adds up the usage of a run's LLM calls. Counts the upstream never
// reported stay nil, so the usage line says null rather than a made-up 0.
type tally struct {
	model         string
	start         time.Time
	turns         int64
	input, output *int64
	cacheRead     *int64
	cacheCreation *int64
	cost          *float64
}

func newTally(model string) *tally { return &tally{model: model, start: time.Now()} }

// add counts one LLM call and the usage it reported (nil: none).
func (t *tally) add(u *wireUsage) {
	t.turns++
	if u == nil {
		return
	}
	addInt(&t.input, &u.PromptTokens)
	addInt(&t.output, &u.CompletionTokens)
	if u.Details != nil {
		addInt(&t.cacheRead, u.Details.CachedTokens)
		addInt(&t.cacheCreation, u.Details.CacheWriteTokens)
	}
	addInt(&t.cacheRead, u.CacheReadInputTokens)
	addInt(&t.cacheCreation, u.CacheCreationInputTokens)
	if u.Cost != nil {
		if t.cost == nil {
			t.cost = new(float64)
		}
		*t.cost += *u.Cost
	}
}

func addInt(sum **int64, v *int64) {
	if v == nil {
		return
	}
	if *sum == nil {
		*sum = new(int64)
	}
	**sum += *v
}

// message is the run's usage line.
func (t *tally) message() *protocol.AgenticMessage {
	return &protocol.AgenticMessage{
		Type: protocol.Usage,
		Usage: &protocol.DriverUsage{
			InputTokens:         t.input,
			OutputTokens:        t.output,
			CacheReadTokens:     t.cacheRead,
			CacheCreationTokens: t.cacheCreation,
			CostUSD:             t.cost,
			DurationMs:          new(time.Since(t.start).Milliseconds()),
			NumTurns:            new(t.turns),
			Model:               new(t.model),
		},
	}
}

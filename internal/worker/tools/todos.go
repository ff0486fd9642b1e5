package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// todo is one task of the list the model keeps with write_todos.
type todo struct {
	Content string `json:"content"`
	Status  string `json:"status"` // pending, in_progress or completed
}

const todoStatuses = "pending, in_progress or completed"

func validTodoStatus(s string) bool {
	switch s {
	case "pending", "in_progress", "completed":
		return true
	}
	return false
}

func (s *Set) writeTodos(_ context.Context, raw json.RawMessage) Result {
	var a struct {
		Todos *[]struct {
			Content *string `json:"content"`
			Status  *string `json:"status"`
		} `json:"todos"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	if a.Todos == nil {
		return failure(missing("todos"))
	}
	list := make([]todo, 0, len(*a.Todos))
	for i, t := range *a.Todos {
		switch {
		case t.Content == nil || strings.TrimSpace(*t.Content) == "":
			return errorf("todos[%d] has no content; every todo needs a short description", i)
		case t.Status == nil:
			return errorf("todos[%d] has no status; use one of %s", i, todoStatuses)
		case !validTodoStatus(*t.Status):
			return errorf("todos[%d] has status %q; use one of %s", i, *t.Status, todoStatuses)
		}
		list = append(list, todo{Content: *t.Content, Status: *t.Status})
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(list); err != nil {
		return errorf("could not encode the todo list: %v", err)
	}
	s.mu.Lock()
	s.todos = list
	s.mu.Unlock()
	return Result{Output: fmt.Sprintf("Updated todo list to %s", bytes.TrimSuffix(b.Bytes(), []byte("\n")))}
}

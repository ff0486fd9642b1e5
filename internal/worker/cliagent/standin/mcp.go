package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// mcpServer is an MCP server over stdio, as the agents start them: one
// JSON-RPC message a line on its stdin and stdout.
type mcpServer struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	next  int
	tools []mcpTool
}

// mcpTool is a tool a server lists.
type mcpTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// startMCP starts a server, does the initialize handshake and lists its
// tools.
func startMCP(name, command string, args []string, env map[string]string, dir string) (*mcpServer, error) {
	cmd := exec.Command(command, args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start MCP server %s: %w", name, err)
	}
	s := &mcpServer{name: name, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}
	if _, err := s.rpc("initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": "standin", "version": "0"},
	}); err != nil {
		s.close()
		return nil, fmt.Errorf("MCP server %s: initialize: %w", name, err)
	}
	if err := s.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
		s.close()
		return nil, err
	}
	res, err := s.rpc("tools/list", map[string]any{})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("MCP server %s: tools/list: %w", name, err)
	}
	var list struct {
		Tools []mcpTool `json:"tools"`
	}
	if err := json.Unmarshal(res, &list); err != nil {
		s.close()
		return nil, fmt.Errorf("MCP server %s: tools/list: %w", name, err)
	}
	s.tools = list.Tools
	return s, nil
}

func (s *mcpServer) send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	_, err = s.in.Write(append(b, '\n'))
	return err
}

// rpc sends a request and reads lines until its response, skipping the
// server's notifications and requests.
func (s *mcpServer) rpc(method string, params any) (json.RawMessage, error) {
	s.next++
	id := s.next
	if err := s.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	for {
		line, err := s.out.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("read the response: %w", err)
		}
		var msg struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &msg) != nil || msg.ID == nil || msg.Method != "" || *msg.ID != id {
			continue
		}
		if msg.Error != nil {
			return nil, fmt.Errorf("error %d: %s", msg.Error.Code, msg.Error.Message)
		}
		return msg.Result, nil
	}
}

// call calls a tool: the text of its content, and whether it failed.
func (s *mcpServer) call(tool string, args json.RawMessage) (string, bool, error) {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	res, err := s.rpc("tools/call", map[string]any{"name": tool, "arguments": args})
	if err != nil {
		return "", true, err
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return "", true, err
	}
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n"), r.IsError, nil
}

// callRaw calls a tool: its content as the server sent it, and whether
// it failed.
func (s *mcpServer) callRaw(tool string, args json.RawMessage) ([]json.RawMessage, bool, error) {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	res, err := s.rpc("tools/call", map[string]any{"name": tool, "arguments": args})
	if err != nil {
		return nil, true, err
	}
	var r struct {
		Content []json.RawMessage `json:"content"`
		IsError bool              `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, true, err
	}
	return r.Content, r.IsError, nil
}

// close ends the server: its stdin closed, then the process killed.
func (s *mcpServer) close() {
	s.in.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// mcpSet is the servers an agent started.
type mcpSet []*mcpServer

func (m mcpSet) close() {
	for _, s := range m {
		s.close()
	}
}

// find is the server and tool of a prefixed tool name.
func (m mcpSet) find(name, prefix, sep string) (*mcpServer, string) {
	for _, s := range m {
		p := prefix + s.name + sep
		if strings.HasPrefix(name, p) {
			return s, strings.TrimPrefix(name, p)
		}
	}
	return nil, ""
}

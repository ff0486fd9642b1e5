package daytonatest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// specHost is the server both specs are given for routing: requests to
// the fake are rewritten to it, without the fake's /api and
// /toolbox/{sandboxId} prefixes (the spec's own servers are
// http://localhost:3000 and "/").
const specHost = "http://spec.invalid"

// specs are Daytona's OpenAPI files, loaded once per test binary.
type specs struct {
	api, toolbox routers.Router
}

var loadSpecs = sync.OnceValues(func() (*specs, error) {
	apiRouter, err := loadSpec("testdata/api.yaml", func(doc *openapi3.T) error {
		// OpenAPI forbids paths that differ only in a parameter's name;
		// Daytona's file has GET /sandbox/{sandboxId}/secrets (for
		// runners) beside PUT /sandbox/{sandboxIdOrName}/secrets. The
		// runners' one, which neither the provider nor the fake uses, is
		// dropped so that the file validates and routes.
		const drop = "/sandbox/{sandboxId}/secrets"
		if doc.Paths.Value(drop) == nil {
			return fmt.Errorf("api.yaml: no %s to drop, revisit the fix", drop)
		}
		doc.Paths.Delete(drop)
		// SshAccessValidationDto.sandboxId is a string, but Daytona's
		// validateSshAccess answers null for a token that is not valid
		// (sandbox.service.ts validateSshAccess: { valid: false,
		// sandboxId: null }), and its Go client takes that. The field is
		// made nullable, nothing more.
		v := doc.Components.Schemas["SshAccessValidationDto"]
		if v == nil || v.Value == nil || v.Value.Properties["sandboxId"] == nil || !v.Value.Properties["sandboxId"].Value.Type.Is("string") {
			return fmt.Errorf("api.yaml: no SshAccessValidationDto.sandboxId string to make nullable, revisit the fix")
		}
		v.Value.Properties["sandboxId"].Value.Nullable = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	toolboxRouter, err := loadSpec("testdata/toolbox.yaml", func(doc *openapi3.T) error {
		// ErrorResponse.code is `allOf: [DaemonErrorCode]` together with
		// `type: object`, but DaemonErrorCode is a string enum and the
		// daemon sends a string ("NOT_FOUND"): no value can satisfy both.
		// Only the contradicting `type: object` is dropped; the enum
		// still applies.
		er := doc.Components.Schemas["ErrorResponse"]
		if er == nil || er.Value == nil || er.Value.Properties["code"] == nil {
			return fmt.Errorf("toolbox.yaml: no ErrorResponse.code to fix")
		}
		code := er.Value.Properties["code"].Value
		if !code.Type.Is("object") || len(code.AllOf) != 1 {
			return fmt.Errorf("toolbox.yaml: ErrorResponse.code changed (%v), revisit the fix", code.Type)
		}
		code.Type = nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &specs{api: apiRouter, toolbox: toolboxRouter}, nil
})

// loadSpec loads and checks an OpenAPI file and routes it under specHost.
func loadSpec(path string, fix func(*openapi3.T) error) (routers.Router, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if fix != nil {
		if err := fix(doc); err != nil {
			return nil, err
		}
	}
	// Examples in Daytona's files do not always match their schemas
	// (Sandbox's example has buildInfo: ""); they are documentation, not
	// the API, so they are not checked. Everything else is.
	if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("validate %s: %w", path, err)
	}
	doc.Servers = openapi3.Servers{{URL: specHost}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", path, err)
	}
	return router, nil
}

// conformance is an http.RoundTripper that checks every exchange with the
// fake against Daytona's OpenAPI files:
//   - the operation must exist in the spec;
//   - a 2xx answer must be to a request the spec allows (else the fake
//     accepted what Daytona would reject) and must match the spec
//     (status, content type, body);
//   - an error status the operation declares must match its schema; one
//     it does not declare (401, 404, 429... which Daytona's file leaves
//     out) must carry a JSON body with statusCode and message.
//
// Security is not checked against the spec (AuthenticationFunc is a
// no-op): the fake's own 401 handling is tested on its own.
type conformance struct {
	t     testing.TB
	specs *specs
	next  http.RoundTripper

	mu  sync.Mutex
	ops map[string]int // operationId: exchanges checked
}

func newConformance(t testing.TB) *conformance {
	t.Helper()
	s, err := loadSpecs()
	if err != nil {
		t.Fatalf("OpenAPI files: %v", err)
	}
	return &conformance{t: t, specs: s, next: http.DefaultTransport, ops: map[string]int{}}
}

// client is an HTTP client whose exchanges are checked.
func (c *conformance) client() *http.Client { return &http.Client{Transport: c} }

// checked returns how many exchanges of each operation were checked.
func (c *conformance) checked() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.ops {
		out[k] = v
	}
	return out
}

func (c *conformance) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rbody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	if err := c.check(req, body, resp, rbody); err != nil {
		c.t.Errorf("spec conformance: %s %s → %d: %v\nresponse: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, err, cut(rbody))
	}
	return resp, nil
}

func cut(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

func (c *conformance) check(req *http.Request, body []byte, resp *http.Response, rbody []byte) error {
	router, path := c.specs.api, ""
	switch p := req.URL.Path; {
	case strings.HasPrefix(p, "/api/"):
		path = strings.TrimPrefix(p, "/api")
	case strings.HasPrefix(p, "/toolbox/"):
		rest := strings.TrimPrefix(p, "/toolbox/")
		i := strings.Index(rest, "/")
		if i < 0 {
			return fmt.Errorf("toolbox path without an endpoint")
		}
		router, path = c.specs.toolbox, rest[i:]
	default:
		return fmt.Errorf("path outside /api and /toolbox")
	}
	u := specHost + path
	if req.URL.RawQuery != "" {
		u += "?" + req.URL.RawQuery
	}
	sreq, err := http.NewRequest(req.Method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	sreq.Header = req.Header.Clone()
	route, params, err := router.FindRoute(sreq)
	if err != nil {
		return fmt.Errorf("no such operation in the spec: %w", err)
	}
	c.mu.Lock()
	c.ops[route.Operation.OperationID]++
	c.mu.Unlock()

	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{
		Request:    sreq,
		PathParams: params,
		Route:      route,
		Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ok && reqErr != nil {
		return fmt.Errorf("the fake accepted a request the spec does not allow: %w", reqErr)
	}
	if !ok && route.Operation.Responses.Status(resp.StatusCode) == nil {
		var eb struct {
			StatusCode *int            `json:"statusCode"`
			Message    json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal(rbody, &eb); err != nil {
			return fmt.Errorf("error body is not JSON: %w", err)
		}
		if eb.StatusCode == nil || *eb.StatusCode != resp.StatusCode {
			return fmt.Errorf("error body's statusCode is not %d", resp.StatusCode)
		}
		var m any
		if err := json.Unmarshal(eb.Message, &m); err != nil {
			return fmt.Errorf("error body without message")
		}
		switch m.(type) {
		case string, []any:
		default:
			return fmt.Errorf("error body's message is %T, not a string or list", m)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			return fmt.Errorf("error content type %q", resp.Header.Get("Content-Type"))
		}
		return nil
	}
	// Daytona's file gives the bulk download's multipart answer the
	// schema gin.H (an object of objects), which its daemon's parts (the
	// files' bytes, JSON errors) never match: that body is checked by the
	// test that asks for it, its status and content type here.
	multipartBody := route.Operation.OperationID == "DownloadFiles" && strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/form-data")
	return openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(rbody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: multipartBody},
	})
}

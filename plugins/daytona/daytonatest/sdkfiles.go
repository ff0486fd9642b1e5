package daytonatest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// ToolboxFiles moves files through a sandbox's toolbox file API the way
// Daytona's SDKs do (libs/sdk-go file_transfer.go streamUploadFile and
// streamDownloadFile; the Python SDK's upload_files and download_files,
// which put many files in one request): one files/bulk-upload whose
// multipart body is streamed through a pipe, and one
// files/bulk-download whose multipart answer is read part by part. It is
// the baseline amelia's own file transfers are measured against.
type ToolboxFiles struct {
	// URL is the sandbox's toolbox: its ToolboxProxyURL + "/" + its id.
	URL string
	// APIKey is sent as the bearer token.
	APIKey string
	// Client sends the requests; nil is http.DefaultClient.
	Client *http.Client
}

// Toolbox is f's ToolboxFiles for sandbox id, with f's key.
func (f *Fake) Toolbox(id string) *ToolboxFiles {
	return &ToolboxFiles{URL: f.base + "/toolbox/" + id, APIKey: f.key}
}

// Transfer is one file: Local on this host, Remote in the sandbox.
type Transfer struct{ Local, Remote string }

func (t *ToolboxFiles) do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+t.APIKey)
	c := t.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	return resp, nil
}

// Upload writes each file's Local into the sandbox at its Remote, in one
// bulk-upload request.
func (t *ToolboxFiles) Upload(ctx context.Context, files []Transfer) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		_ = pw.CloseWithError(func() error {
			for i, f := range files {
				if err := mw.WriteField(fmt.Sprintf("files[%d].path", i), f.Remote); err != nil {
					return err
				}
				part, err := mw.CreateFormFile(fmt.Sprintf("files[%d].file", i), f.Remote)
				if err != nil {
					return err
				}
				src, err := os.Open(f.Local)
				if err != nil {
					return err
				}
				_, err = io.Copy(part, src)
				src.Close()
				if err != nil {
					return err
				}
			}
			return mw.Close()
		}())
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+"/files/bulk-upload", pr)
	if err != nil {
		_ = pr.CloseWithError(err)
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := t.do(req)
	_ = pr.CloseWithError(io.ErrClosedPipe) // ends the writer if the request ended early
	if err != nil {
		return fmt.Errorf("upload %d files: %w", len(files), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// Download writes each file's Remote to its Local (parent directories
// made), in one bulk-download request; the first file that failed is
// the error.
func (t *ToolboxFiles) Download(ctx context.Context, files []Transfer) error {
	paths := make([]string, len(files))
	local := make(map[string]string, len(files))
	for i, f := range files {
		paths[i] = f.Remote
		local[f.Remote] = f.Local
	}
	body, err := json.Marshal(map[string][]string{"paths": paths})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+"/files/bulk-download", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "multipart/form-data")
	resp, err := t.do(req)
	if err != nil {
		return fmt.Errorf("download %d files: %w", len(files), err)
	}
	defer resp.Body.Close()
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		return fmt.Errorf("download %d files: not a multipart answer: %q", len(files), resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	got := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("download %d files: %w", len(files), err)
		}
		// The part's file name is the path asked for.
		_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		remote := dp["filename"]
		switch part.FormName() {
		case "error":
			var e api.ToolboxError
			_ = json.NewDecoder(part).Decode(&e)
			return fmt.Errorf("download %s: %s", remote, e.Message)
		case "file":
			dst, ok := local[remote]
			if !ok {
				return fmt.Errorf("download: a file not asked for: %q", remote)
			}
			if err := saveFile(dst, part, part.Header.Get("Content-Length")); err != nil {
				return fmt.Errorf("download %s: %w", remote, err)
			}
			got++
		}
	}
	if got != len(files) {
		return fmt.Errorf("download %d files: got %d", len(files), got)
	}
	return nil
}

func saveFile(dst string, r io.Reader, length string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if want, perr := strconv.ParseInt(length, 10, 64); perr == nil && n != want {
		return fmt.Errorf("truncated: %d of %d bytes", n, want)
	}
	return nil
}

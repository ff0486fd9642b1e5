// Package protocol implements the wire protocol between amelia-worker, which
// runs inside the sandbox, and the host.
//
// The worker writes one [AgenticMessage] per line to its stdout, as a compact
// JSON object followed by "\n" (JSON lines), and nothing else; the last line
// of a run has type "usage". The host reads the lines back with a [Decoder].
//
// # Compatibility
//
// The format is the one the Python Amelia writes with pydantic v2's
// model_dump_json(), and this package is compatible with it byte for byte:
//
//   - Every line pydantic writes decodes, and encodes again to the identical
//     bytes (testdata/pydantic.jsonl holds lines written by the real pydantic
//     and the tests prove the round trip).
//   - Every line this package writes is what pydantic would write for the
//     same message: keys in the model's field order, every key present, absent
//     values as null, no whitespace, strings escaped the way pydantic escapes
//     them (only '"', '\\' and control characters below U+0020; everything
//     else, including U+2028, U+2029 and DEL, as raw UTF-8), floats laid out
//     the way pydantic lays them out (0.00001, 1e-6, 123.0, 1e+16), NaN and
//     ±Inf as null. The one exception is tool_input, which this package keeps
//     as the JSON text it was given, only compacted; pydantic would parse and
//     re-serialize it. The two agree for anything pydantic itself wrote.
//   - Every line this package writes can be read by pydantic: it is valid
//     UTF-8 (invalid bytes become U+FFFD), escapes of lone UTF-16 surrogates
//     in tool_input are replaced by \ufffd (pydantic rejects them), and
//     the limits of pydantic's JSON parser hold: at most 200 levels of
//     nesting, at most 4300 characters before the decimal point of a number.
//     The same limits apply when reading.
//
// Reading follows pydantic where that is cheap and unsurprising: unknown keys
// are ignored, a missing key reads as its default (nil, or false for
// is_error), a repeated key takes its last value, an integer field accepts an
// integral number written as a float (1.0, 1e3), cost_usd accepts any number
// (out of range ones become ±Inf, which are written back as null). It is
// more lenient in one respect: invalid UTF-8 and escapes of lone surrogates
// read as U+FFFD, where pydantic rejects the line. It is stricter than
// pydantic's lax mode in another: a value of the wrong JSON type (a string
// for an integer, 1 for a boolean) is an error that names the key.
//
// # Serve mode
//
// A persistent worker (`amelia-worker serve`, as the Python worker's serve
// mode) takes many commands over one stdin: each is a [Request], framed by
// [AppendRequest] and read by [ReadRequest] (a 4-byte big-endian length,
// then the JSON of a WorkerRequest, at most [MaxRequestBytes]). It answers
// each with newline-delimited frames, read by a [FrameDecoder]: one msg
// frame per message line, the line carried as a JSON string
// ([AppendMsgFrame]), an error frame when the command failed
// ([AppendErrorFrame]), and a done frame ([AppendDoneFrame]) that ends it.
// Requests and frames are written byte for byte as pydantic writes the
// Python models (testdata/serve.jsonl holds lines it wrote).
//
// Note that [encoding/json.Marshal] re-escapes the output of MarshalJSON
// methods (<, >, & and U+2028/U+2029 become \u003c and so on), so it does not
// produce pydantic's bytes; use [Encoder], [AppendJSON] or the MarshalJSON
// methods directly for that.
package protocol

// Version is the protocol's version. It changes only when a change would
// break a reader of the other side; `amelia-worker version` reports it.
const Version = 1

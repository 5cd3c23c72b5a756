package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
)

// cmdDeadLetter prints a dead-letter file (an output's dead_letter_dir):
// for each batch the sink refused, a line {"type":"dead_letter",...} with
// the time, output, error and record count, then the batch's records as
// JSON Lines (the stdout output's json format).
const deadLetterUsage = `usage: gpusampler deadletter FILE

Prints a dead-letter file (an output's dead_letter_dir/NAME.deadletter):
for each batch the sink refused as permanent, a line {"type":"dead_letter",
"time","output","error","records","bytes"}, then the batch's records in the
stdout output's json format.
`

func cmdDeadLetter(args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, deadLetterUsage)
		return errHelp
	}
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usagef("want one dead-letter file (an output's dead_letter_dir/NAME.deadletter)")
	}
	path := args[0]
	w := bufio.NewWriter(stdout)
	enc := jsonl.New(jsonl.Options{})
	err := deadletter.ReadFile(path, func(e *deadletter.Entry) error {
		line, err := json.Marshal(struct {
			Type string `json:"type"`
			deadletter.Header
		}{"dead_letter", e.Header})
		if err != nil {
			return err
		}
		w.Write(append(line, '\n'))
		enc.Reset()
		enc.Encode(&e.Batch)
		_, err = w.Write(enc.Bytes())
		return err
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

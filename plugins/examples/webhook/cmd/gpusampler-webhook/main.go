// Command gpusampler-webhook is the webhook alert plugin for gpusampler:
// see plugins/examples/webhook/README.md.
package main

import (
	"github.com/gpusampler/gpusampler/plugins/examples/webhook"
	"github.com/gpusampler/gpusampler/plugins/sdk"
)

func main() { sdk.Serve(webhook.New()) }

package nats_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
)

// A batch with an Origin (a disk-buffer backlog replayed under another
// host name and global tags) is published on its host's and tags'
// subjects and carries them in every encoding; the next batch without one
// is the output's own again.
func TestOriginIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	for _, enc := range natsout.Encodings {
		t.Run(enc, func(t *testing.T) {
			col := collect(t, s, "o."+enc+".>")
			cfg := natsout.DefaultConfig()
			cfg.Encoding = enc
			cfg.Subject = "o." + enc + ".{host}.{tag:rack}.{gpu}.{group}"
			cfg.EventSubject = "o." + enc + ".{host}.{tag:rack}.{gpu}.events"
			cfg.SelfSubject = "o." + enc + ".{host}.{tag:rack}.self"
			out := newOutput(t, s, cfg, natsout.WithHost("hostB"), natsout.WithGlobalTags(map[string]string{"rack": "r2"}))
			a := &record.Origin{Host: "hostA", Tags: map[string]string{"rack": "r1"}}
			for i, o := range []*record.Origin{a, nil} {
				b := roundTripBatch()
				b.Seq, b.Origin = uint64(i+1), o
				if err := out.Write(context.Background(), b); err != nil {
					t.Fatal(err)
				}
			}
			recs := col.drain(out)
			if len(recs) == 0 {
				t.Fatal("nothing published")
			}
			seen := map[uint64]int{}
			for _, r := range recs {
				host, rack := "hostB", "r2"
				if r.Seq == 1 {
					host, rack = "hostA", "r1"
				}
				seen[r.Seq]++
				gotRack := r.Tags["rack"]
				if enc == natsout.EncodingInflux && strings.HasSuffix(r.Subject, ".self") && len(r.Batch.Events) == 1 {
					// line protocol's self-metrics: tags but host come back as attributes
					for _, at := range r.Batch.Events[0].Attrs {
						if at.Key == "rack" {
							gotRack = at.Value
						}
					}
				}
				if !strings.HasPrefix(r.Subject, "o."+enc+"."+host+"."+rack+".") || r.Host != host || gotRack != rack {
					t.Errorf("batch %d: subject %s, host %q, rack %q; want %s and rack %s", r.Seq, r.Subject, r.Host, gotRack, host, rack)
				}
			}
			if seen[1] == 0 || seen[2] == 0 {
				t.Fatalf("messages per batch: %v", seen)
			}
		})
	}
}

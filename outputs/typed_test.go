package outputs_test

import (
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

type fakeOpts struct{ n int }

func typedFake(seen *[]fakeOpts) outputs.Kind {
	return outputs.Typed(outputs.TypedKind[fakeOpts]{
		Kind:  "fake",
		Parse: func(*config.Table) fakeOpts { return fakeOpts{n: 7} },
		Build: func(_ *outputs.Block, o fakeOpts, _ outputs.BuildEnv) (record.Output, error) {
			*seen = append(*seen, o)
			return nil, nil
		},
		Check: func(_ *outputs.Block, o fakeOpts) (_, _ config.Errors) {
			*seen = append(*seen, o)
			return nil, nil
		},
		Timeouts: func(_ *outputs.Block, o fakeOpts) outputs.KindTimeouts {
			return outputs.KindTimeouts{Request: outputs.Timeout{Key: "t", D: 1}}
		},
	})
}

func TestTyped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options any
		want    fakeOpts
		wantErr string // "" for none
	}{
		{"typed", fakeOpts{n: 3}, fakeOpts{n: 3}, ""},
		{"none", nil, fakeOpts{}, ""},
		{"other type", struct{ n int }{n: 3}, fakeOpts{}, "output f (fake): parsed options are struct { n int }, want outputs_test.fakeOpts"},
		{"pointer", &fakeOpts{n: 3}, fakeOpts{}, "parsed options are *outputs_test.fakeOpts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []fakeOpts
			k := typedFake(&seen)
			if got := k.Parse(nil); got != (fakeOpts{n: 7}) {
				t.Fatalf("Parse = %#v", got)
			}
			b := &outputs.Block{Kind: "fake", Name: "f", Options: tc.options}
			_, err := k.Build(b, outputs.BuildEnv{})
			problems, _ := k.Check(b)
			timeouts := k.Timeouts(b)
			if tc.wantErr == "" {
				if err != nil || len(problems) != 0 {
					t.Fatalf("Build: %v, Check: %v", err, problems)
				}
				if len(seen) != 2 || seen[0] != tc.want || seen[1] != tc.want {
					t.Fatalf("Build and Check saw %v, want %v", seen, tc.want)
				}
				if timeouts.Request.Key != "t" {
					t.Fatalf("Timeouts = %+v", timeouts)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Build error %v, want one containing %q", err, tc.wantErr)
			}
			if len(problems) != 1 || !strings.Contains(problems[0].Error(), tc.wantErr) {
				t.Fatalf("Check problems %v, want one containing %q", problems, tc.wantErr)
			}
			if len(seen) != 0 || timeouts != (outputs.KindTimeouts{}) {
				t.Fatalf("ran the kind's functions on mistyped options: saw %v, timeouts %+v", seen, timeouts)
			}
		})
	}
}

package outputs

import (
	"fmt"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/record"
)

// TypedKind describes a kind whose parsed options are an O: Parse returns
// one, and Build, Check and Timeouts receive it. Typed turns it into the
// registry's Kind, checking the options' type in one place, so that no
// kind asserts Block.Options itself. The fields mean what Kind's fields of
// the same names mean.
type TypedKind[O any] struct {
	Kind          string
	SampleConfig  string
	Parse         func(t *config.Table) O
	Build         func(b *Block, opts O, env BuildEnv) (record.Output, error)
	Check         func(b *Block, opts O) (problems, warnings config.Errors)
	Timeouts      func(b *Block, opts O) KindTimeouts
	Exclusive     bool
	OutOfProcess  bool
	ExampleActive bool
	// SinkKeys: see Kind.
	SinkKeys []string
	// SummaryHistograms: see Kind.
	SummaryHistograms func(m catalog.Metric) (scale float64, ok bool)
}

// Typed returns the Kind that k describes. A block whose Options hold
// something other than an O (a block built in code with another kind's
// options) fails Build with an error naming the kind and both types, is a
// problem for Check, and has no timeouts of its own; a block without
// options (nil) gets the zero O.
func Typed[O any](k TypedKind[O]) Kind {
	out := Kind{Kind: k.Kind, SampleConfig: k.SampleConfig, Exclusive: k.Exclusive,
		OutOfProcess: k.OutOfProcess, ExampleActive: k.ExampleActive, SinkKeys: k.SinkKeys, SummaryHistograms: k.SummaryHistograms}
	if k.Parse != nil {
		out.Parse = func(t *config.Table) any { return k.Parse(t) }
	}
	if k.Build != nil {
		out.Build = func(b *Block, env BuildEnv) (record.Output, error) {
			opts, err := OptionsOf[O](b)
			if err != nil {
				return nil, err
			}
			return k.Build(b, opts, env)
		}
	}
	if k.Check != nil {
		out.Check = func(b *Block) (problems, warnings config.Errors) {
			opts, err := OptionsOf[O](b)
			if err != nil {
				return config.Errors{b.ErrorAt("", err.Error())}, nil
			}
			return k.Check(b, opts)
		}
	}
	if k.Timeouts != nil {
		out.Timeouts = func(b *Block) KindTimeouts {
			opts, err := OptionsOf[O](b)
			if err != nil {
				return KindTimeouts{}
			}
			return k.Timeouts(b, opts)
		}
	}
	return out
}

// OptionsOf returns b's parsed options as an O: the zero O when b has
// none, an error naming the block and both types when they are another
// type.
func OptionsOf[O any](b *Block) (O, error) {
	var zero O
	if b.Options == nil {
		return zero, nil
	}
	opts, ok := b.Options.(O)
	if !ok {
		return zero, fmt.Errorf("output %s (%s): parsed options are %T, want %T", b.Name, b.Kind, b.Options, zero)
	}
	return opts, nil
}

// Package telegraf is the root of gpusampler's Telegraf module: the
// inputs.gpusampler plugin (plugins/inputs/gpusampler) and its execd shim
// (cmd/telegraf-gpusampler). It is a module of its own so that the main
// gpusampler module never depends on Telegraf.
package telegraf

// Package models is ortrain's registry of built-in model recipes: a name
// (model.recipe in the configuration) and a free-form parameter table
// ([model.params]) give a forward ONNX graph plus how artifacts.Build is to
// add its loss and which data tensors feed its inputs.
//
//	m, err := models.Build("resnet", cfg.Model.Params)
//	artifacts.Build(artifacts.Options{Graph: m.Graph, Loss: m.Loss,
//		LabelSmoothing: m.LabelSmoothing, Out: dir, ...})
//
// The recipes live in subpackages (resnet, vqgan, diffusionlm), each with a
// Config whose toml tags are the parameter names, a Default, a closed-form
// ParamCount and a Build.
package models

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/ortrain/ortrain/models/diffusionlm"
	"github.com/ortrain/ortrain/models/resnet"
	"github.com/ortrain/ortrain/models/vqgan"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
)

// Model is a built recipe.
type Model struct {
	// Graph is the forward graph with initial weights as initializers.
	Graph *graph.Graph
	// Loss is artifacts.Options.Loss: a built-in loss (cross_entropy...)
	// or output:loss when the graph computes its own.
	Loss string
	// LabelSmoothing is artifacts.Options.LabelSmoothing.
	LabelSmoothing float64
	// Feeds maps each graph input that data must feed (after
	// artifacts.Build, "target" included for built-in losses) to the name of
	// the tensor the data loader produces for it.
	Feeds map[string]string
	// ParamCount is the recipe's closed-form count of trained scalars;
	// CountParams(Graph) equals it.
	ParamCount int64
	// Frozen are globs of parameters the recipe keeps frozen (a
	// perceptual network's), added to model.frozen.
	Frozen []string
	// ClipGroups are the name prefixes of modules the reference trains
	// with an optimizer of their own (a GAN's discriminators), whose
	// gradients gradient clipping scales by their own norm
	// (optim.Config.ClipGroups).
	ClipGroups []string
}

// Recipe is one entry of the registry.
type Recipe struct {
	Name    string // model.recipe
	Summary string // one line for listings
	build   func(params map[string]any) (*Model, error)
	check   func(params map[string]any) (int64, error)
	// parts builds a named part of the model for inference (no loss), its
	// parameters named as in the whole; nil when the recipe has none.
	parts map[string]func(params map[string]any) (*graph.Graph, error)
	// added says which modules a configuration adds to a checkpoint's
	// while leaving the rest of the computation as it was (nil: none can).
	added func(old, now map[string]any) ([]string, error)
	// codebook is the number of codes a VQ recipe's "codes" output picks
	// from (nil: not a VQ recipe).
	codebook func(params map[string]any) (int64, error)
	// defaults is the recipe's Config with every parameter at its default.
	defaults func() any
}

// recipes is the registry, by name: the one list of recipes, which config
// accepts.
var recipes = map[string]Recipe{
	"resnet": {Name: "resnet", Summary: "ResNet-18/34/50/101/152 image classifier, torchvision layout (cross-entropy)",
		build: buildResNet, check: checker("resnet", resnet.Default), defaults: func() any { return resnet.Default() }},
	"vqgan3d": {Name: "vqgan3d", Summary: "3D VQ-GAN autoencoder for CT volumes (L1 + VQ codebook/commitment losses; optional 2-D/3-D discriminators and a perceptual term)",
		build: buildVQGAN, check: checker("vqgan3d", vqgan.Default), defaults: func() any { return vqgan.Default() },
		parts: map[string]func(map[string]any) (*graph.Graph, error){"encoder": vqganEncoder, "decoder": vqganDecoder},
		added: vqganAdded, codebook: vqganCodebook},
	"bd3lm": {Name: "bd3lm", Summary: "block-diffusion transformer LM, BD3-LM/HDP-Diffusion (masked-token NELBO)",
		build: buildLM, check: checker("bd3lm", diffusionlm.Default), defaults: func() any { return diffusionlm.Default() }},
}

// Names lists the registered recipes, sorted.
func Names() []string {
	var names []string
	for n := range recipes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the recipe registered under name.
func Lookup(name string) (Recipe, bool) {
	r, ok := recipes[name]
	return r, ok
}

// Error is a recipe name or parameter ortrain rejects.
type Error struct{ Msg string }

// Error formats the error with the package name.
func (e *Error) Error() string { return "models: " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// Build builds the named recipe with params laid over its defaults.
// Unknown parameter names and wrong types are errors naming them.
func Build(name string, params map[string]any) (*Model, error) {
	r, ok := recipes[name]
	if !ok {
		return nil, &Error{fmt.Sprintf("unknown recipe %q; known: %s", name, strings.Join(Names(), ", "))}
	}
	return r.build(params)
}

// Check decodes and validates params for the named recipe without building
// the graph (no weights are drawn), and returns the number of parameters
// the model would train: a cheap check for configuration files.
func Check(name string, params map[string]any) (int64, error) {
	r, ok := recipes[name]
	if !ok {
		return 0, &Error{fmt.Sprintf("unknown recipe %q; known: %s", name, strings.Join(Names(), ", "))}
	}
	return r.check(params)
}

// Added reports whether the recipe's parameters now only add modules to
// a model built with old (the VQ-GAN's discriminators and perceptual
// term, turned on after an L1-only stage), and returns the name prefixes
// of the trained parameters they add: a resumed run initialises those
// afresh and loads the rest from the checkpoint. ok is false when the
// change is anything else.
func Added(name string, old, now map[string]any) (prefixes []string, ok bool) {
	r, found := recipes[name]
	if !found || r.added == nil {
		return nil, false
	}
	prefixes, err := r.added(old, now)
	return prefixes, err == nil
}

// CodebookSize is the number of codes a VQ recipe's codes output picks
// from, for codebook usage; 0 for other recipes or parameters it cannot
// read.
func CodebookSize(name string, params map[string]any) int64 {
	r, ok := recipes[name]
	if !ok || r.codebook == nil {
		return 0
	}
	n, err := r.codebook(params)
	if err != nil {
		return 0
	}
	return n
}

func vqganCodebook(params map[string]any) (int64, error) {
	c := vqgan.Default()
	if err := decode("vqgan3d", params, &c); err != nil {
		return 0, err
	}
	return int64(c.CodebookSize), nil
}

// vqganAdded: a configuration that turns the discriminators and/or the
// perceptual term on over a checkpoint of a run with neither, changing
// no other parameter. The perceptual network is frozen (never in a
// checkpoint), so only discriminators are new trained modules.
func vqganAdded(old, now map[string]any) ([]string, error) {
	a, b := vqgan.Default(), vqgan.Default()
	if err := decode("vqgan3d", old, &a); err != nil {
		return nil, err
	}
	if err := decode("vqgan3d", now, &b); err != nil {
		return nil, err
	}
	if a.GAN() || a.PerceptualWeight > 0 || !b.GAN() && b.PerceptualWeight == 0 {
		return nil, fmt.Errorf("not a change from an L1-only model to one with discriminators or a perceptual term")
	}
	added := b.Discriminators()
	b.ImageGANWeight, b.VideoGANWeight, b.GANFeatWeight, b.DiscIterStart = a.ImageGANWeight, a.VideoGANWeight, a.GANFeatWeight, a.DiscIterStart
	b.DiscChannels, b.DiscLayers, b.DiscNorm, b.DiscLossType = a.DiscChannels, a.DiscLayers, a.DiscNorm, a.DiscLossType
	b.PerceptualWeight, b.PerceptualModel = a.PerceptualWeight, a.PerceptualModel
	if !reflect.DeepEqual(a, b) {
		return nil, fmt.Errorf("other parameters change too")
	}
	return added, nil
}

// Param is one of a recipe's parameters (a model.params key) and its
// default.
type Param struct {
	Key     string
	Default any
}

// Params lists the recipe's parameters in their Config's order, with
// their defaults: the toml tags of its Config.
func (r Recipe) Params() []Param {
	if r.defaults == nil {
		return nil
	}
	v := reflect.ValueOf(r.defaults())
	var out []Param
	for i := range v.NumField() {
		key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ",")
		if key != "" && key != "-" {
			out = append(out, Param{key, v.Field(i).Interface()})
		}
	}
	return out
}

// Parts lists the parts a recipe can export on their own, sorted.
func (r Recipe) Parts() []string {
	var out []string
	for p := range r.parts {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Part builds part of the named recipe for inference: a graph without the
// loss whose parameters (initializers, initial values) are named as in the
// whole model, so trained weights fill them by name.
func Part(name, part string, params map[string]any) (*graph.Graph, error) {
	r, ok := recipes[name]
	if !ok {
		return nil, &Error{fmt.Sprintf("unknown recipe %q; known: %s", name, strings.Join(Names(), ", "))}
	}
	build, ok := r.parts[part]
	if !ok {
		if len(r.parts) == 0 {
			return nil, &Error{fmt.Sprintf("recipe %s has no parts to export on their own", name)}
		}
		return nil, &Error{fmt.Sprintf("recipe %s has no part %q; it has %s", name, part, strings.Join(r.Parts(), ", "))}
	}
	return build(params)
}

// vqganEncoder is the encoder with the quantiser: volume in, codes out.
func vqganEncoder(params map[string]any) (*graph.Graph, error) {
	m, err := buildVQGAN(params)
	if err != nil {
		return nil, err
	}
	g := m.Graph
	g.Outputs = []string{vqgan.Codes}
	g.Prune()
	return g, nil
}

// vqganDecoder is the decoder from codes: codes in, reconstruction out.
func vqganDecoder(params map[string]any) (*graph.Graph, error) {
	c := vqgan.Default()
	if err := decode("vqgan3d", params, &c); err != nil {
		return nil, err
	}
	g, err := vqgan.BuildDecoder(c)
	if err != nil {
		return nil, &Error{err.Error()}
	}
	return g, nil
}

// recipeConfig is what every recipe's Config provides.
type recipeConfig interface {
	Validate() error
	ParamCount() int64
}

// checker returns a Check for a recipe whose defaults def gives.
func checker[C recipeConfig](recipe string, def func() C) func(map[string]any) (int64, error) {
	return func(params map[string]any) (int64, error) {
		c := def()
		if err := decode(recipe, params, &c); err != nil {
			return 0, err
		}
		if err := c.Validate(); err != nil {
			return 0, &Error{err.Error()}
		}
		return c.ParamCount(), nil
	}
}

// tomlKeyError is how the TOML decoder words a value of the wrong type.
var tomlKeyError = regexp.MustCompile(`^toml: line \d+ \(last key "([^"]*)"\): (.*)$`)

// decode lays params over cfg (a pointer to a recipe Config) through TOML,
// so the parameter names are the Config's toml tags and the types follow
// TOML's rules (an integer is accepted for a float).
func decode(recipe string, params map[string]any, cfg any) error {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(params); err != nil {
		return &Error{fmt.Sprintf("%s: parameters: %v", recipe, err)}
	}
	md, err := toml.Decode(buf.String(), cfg)
	if err != nil {
		// The line is of the re-encoded parameters, not the user's file:
		// name the parameter instead.
		if m := tomlKeyError.FindStringSubmatch(err.Error()); m != nil {
			return &Error{fmt.Sprintf("%s: parameter %s: %s", recipe, m[1], m[2])}
		}
		return &Error{fmt.Sprintf("%s: parameters: %v", recipe, err)}
	}
	if un := md.Undecoded(); len(un) > 0 {
		var keys []string
		for _, k := range un {
			keys = append(keys, k.String())
		}
		return &Error{fmt.Sprintf("%s: unknown parameters %s", recipe, strings.Join(keys, ", "))}
	}
	return nil
}

func buildResNet(params map[string]any) (*Model, error) {
	c := resnet.Default()
	if err := decode("resnet", params, &c); err != nil {
		return nil, err
	}
	g, err := resnet.Build(c)
	if err != nil {
		return nil, &Error{err.Error()}
	}
	return &Model{Graph: g, Loss: loss.CrossEntropy, LabelSmoothing: c.LabelSmoothing,
		Feeds: map[string]string{resnet.Input: "image", loss.Target: "label"}, ParamCount: c.ParamCount()}, nil
}

func buildVQGAN(params map[string]any) (*Model, error) {
	c := vqgan.Default()
	if err := decode("vqgan3d", params, &c); err != nil {
		return nil, err
	}
	g, err := vqgan.Build(c)
	if err != nil {
		return nil, &Error{err.Error()}
	}
	var frozen []string
	if c.PerceptualWeight > 0 {
		frozen = []string{vqgan.Perceptual + "*"}
	}
	return &Model{Graph: g, Loss: loss.Output + ":" + loss.Name,
		Feeds: map[string]string{vqgan.Input: "volume"}, ParamCount: c.ParamCount(), ClipGroups: c.Discriminators(), Frozen: frozen}, nil
}

// LMConfig decodes the bd3lm recipe's parameters (as model.params gives
// them) into its configuration: what a sampler needs to lay out blocks.
func LMConfig(params map[string]any) (diffusionlm.Config, error) {
	c := diffusionlm.Default()
	if err := decode("bd3lm", params, &c); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, &Error{err.Error()}
	}
	return c, nil
}

func buildLM(params map[string]any) (*Model, error) {
	c := diffusionlm.Default()
	if err := decode("bd3lm", params, &c); err != nil {
		return nil, err
	}
	g, err := diffusionlm.Build(c)
	if err != nil {
		return nil, &Error{err.Error()}
	}
	feeds := map[string]string{}
	for _, in := range diffusionlm.Inputs {
		feeds[in] = in
	}
	return &Model{Graph: g, Loss: loss.Output + ":" + loss.Name, Feeds: feeds, ParamCount: c.ParamCount()}, nil
}

// CountParams is the number of scalars artifacts.Build will train in g
// (with nothing frozen): the elements of its floating initializers of rank
// >= 1 other than BatchNormalization running statistics, which are buffers.
func CountParams(g *graph.Graph) int64 {
	buffers := map[string]bool{}
	for _, n := range g.Nodes {
		switch {
		case n.Op == "BatchNormalization":
			buffers[n.Input(3)], buffers[n.Input(4)] = true, true
		case graph.IsUpdateBuffer(n):
			buffers[n.Input(0)] = true
		}
	}
	var total int64
	for _, name := range g.InitOrder {
		info := g.Info(name)
		if info.Float() && info.Rank() >= 1 && !buffers[name] {
			total += graph.Numel(g.Initializers[name])
		}
	}
	return total
}

// Package configs holds ortrain's training presets, embedded in the binary:
// TOML files in the schema of training/config, each naming a built-in model
// recipe (models) with its [model.params]. Data paths are left for the user
// (--set data.train=...) except in quickstart, which trains on synthetic
// phantoms.
//
//	vqgan3d-h200            3D VQ-GAN (~36M), CT patches 256×256×128, one H200
//	vqgan3d-4gpu            the same on 4 GPUs, batch 1 per GPU
//	bd3lm-gsm8k-h200        BD3-LM (124M) on GSM8K, batch 64 × 8 accumulated, bf16
//	hdp-diffusion-gsm8k     HDP-Diffusion, 512 = 128 question + 128 plan + 256 execution
//	resnet50-a10g-*         ResNet-50 on ImageNet, one A10G: conservative, balanced, aggressive
//	quickstart              a small 3D VQ-GAN on synthetic phantoms on the CPU
//	resnet-photos-cpu       a tiny ResNet-18 on scripts/photo-classes' real photos on the CPU
package configs

import (
	"embed"
	"io/fs"
	"sort"
	"strings"

	"github.com/ortrain/ortrain/training/config"
)

//go:embed *.toml
var files embed.FS

// Names lists the presets, sorted, without the .toml extension.
func Names() []string {
	ents, _ := fs.Glob(files, "*.toml")
	for i, e := range ents {
		ents[i] = strings.TrimSuffix(e, ".toml")
	}
	sort.Strings(ents)
	return ents
}

// Raw returns a preset's TOML text.
func Raw(name string) ([]byte, error) {
	return files.ReadFile(name + ".toml")
}

// Load parses a preset on top of config.Default(); like config.Load it does
// not Resolve, so overrides (data paths...) can still be applied.
func Load(name string) (*config.Config, error) {
	b, err := Raw(name)
	if err != nil {
		return nil, &config.Error{Source: name, Msg: "no such preset; known: " + strings.Join(Names(), ", ")}
	}
	return config.Parse(b, "preset "+name)
}

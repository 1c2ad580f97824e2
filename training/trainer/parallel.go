package trainer

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/collective"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
)

// agreeAcrossRanks refuses a data-parallel job whose ranks would run
// different steps: the configuration hash compared at start leaves out
// run lengths, cadences and data paths (a resume may change them), and
// ranks disagreeing on them would wait for each other's collectives
// forever (each node with its own config file, or its own copy of the
// data).
func (t *Trainer) agreeAcrossRanks(comm *collective.Comm, c *config.Config, train, val data.Dataset) error {
	valLen := -1
	if val != nil {
		valLen = val.Len()
	}
	checks := []struct {
		key, what string
		v         float64
	}{
		{"trainer.max_steps", "optimizer steps (from trainer.max_steps or trainer.max_epochs)", float64(t.state.MaxSteps)},
		{"data.train", "training samples", float64(train.Len())},
		{"data.val", "validation samples (-1: none)", float64(valLen)},
		{"trainer.val_check_interval", "steps between validations", float64(t.valEvery)},
		{"trainer.limit_val_batches", "validation batches (0: all)", float64(c.Trainer.LimitValBatches)},
		{"trainer.accumulate_grad_batches", "batches per step", float64(t.accum)},
	}
	vals := make([]float64, len(checks))
	for i, ch := range checks {
		vals[i] = ch.v
	}
	i, root, mine, err := comm.Agree(vals)
	if err != nil || i < 0 {
		return err
	}
	ch := checks[i]
	if comm.Rank() == 0 {
		return DisagreeError{&config.Error{Key: ch.key, Msg: fmt.Sprintf("the ranks disagree on the %s: rank 0 has %g, another rank not: every rank must train the same run on the same data", ch.what, root)}}
	}
	return DisagreeError{&config.Error{Key: ch.key, Msg: fmt.Sprintf("the ranks disagree on the %s: rank %d has %g, rank 0 %g: every rank must train the same run on the same data", ch.what, comm.Rank(), mine, root)}}
}

// paddedIndex is the dataset index that rank's shard of an unshuffled
// n-sample set repeats at its end to give every rank as many samples (as
// PyTorch's DistributedSampler pads: position p ≥ n of the interleaved
// order wraps to p mod n), or -1 where the rank's shard has no padding.
// Only a shard's last position can be padding (data.Loader's order).
func paddedIndex(n, rank, world int) int {
	if n <= 0 || world <= 1 {
		return -1
	}
	perRank := (n + world - 1) / world
	if p := (perRank-1)*world + rank; p >= n {
		return p % n
	}
	return -1
}

// unevenShards says how a data-parallel run's sets split unevenly over
// the ranks: the training samples an epoch repeats (or, with
// data.drop_last, leaves out), and whether validation's repeats are left
// out of its sums; "" when both divide.
func unevenShards(c *config.Config, train, val data.Dataset, world int, valShards bool) string {
	var parts []string
	if n := train.Len(); n%world != 0 {
		if c.Data.DropLast {
			parts = append(parts, fmt.Sprintf("%d training samples over %d ranks: %d left out of each epoch (data.drop_last)", n, world, n%world))
		} else {
			parts = append(parts, fmt.Sprintf("%d training samples over %d ranks: %d repeated each epoch, as PyTorch's DistributedSampler pads (data.drop_last = true leaves %d out instead)",
				n, world, world-n%world, n%world))
		}
	}
	if val != nil && valShards {
		if n := val.Len(); n%world != 0 {
			parts = append(parts, fmt.Sprintf("%d validation samples over %d ranks: %d ranks validate one repeated sample each, left out of the metrics (each sample counts once)", n, world, world-n%world))
		}
	}
	return strings.Join(parts, "; ")
}

// DisagreeError is a refusal every rank of a data-parallel job reaches at
// the same point: the ranks leave the job in order (rank 0 first removing
// the run directory it made) rather than one aborting the others.
type DisagreeError struct{ Err *config.Error }

// allReduce makes the step's result the job's: the losses and terms
// averaged and the counts summed over the ranks, ok only where every rank's
// loss was finite, and (when ok) every gradient summed in place — the
// optimizer then divides by the world size with the gradient scale.
func (t *Trainer) allReduce(r *callback.StepResult, ok bool) (bool, error) {
	v := append(t.reduce[:0], r.Loss, float64(r.Samples), float64(r.Tokens), float64(r.Positions), 0)
	if !ok {
		v[4] = 1
	}
	v = append(v, t.terms...)
	t.reduce = v
	if err := t.comm.SumFloat64(v); err != nil {
		return false, err
	}
	n := float64(t.comm.Size())
	r.Loss, r.Samples, r.Tokens, r.Positions = v[0]/n, int64(v[1]), int64(v[2]), int64(v[3])
	for i := range t.terms {
		t.terms[i] = v[5+i] / n
	}
	if v[4] != 0 {
		return false, nil // some rank's loss was not finite: all skip
	}
	return true, t.sumGradients()
}

// sumGradients sums every gradient across the ranks in place: on a GPU
// with NCCL in one group of calls, nothing crossing to the host; on the
// CPU with MPI, small ones packed into a bucket per call, one too large
// for it on its own.
func (t *Trainer) sumGradients() error {
	if t.dcomm != nil {
		return t.dcomm.Sum(t.eng.deviceGradients())
	}
	grads := t.eng.gradients()
	if t.bucket == nil {
		total := 0
		for _, g := range grads {
			total += len(g)
		}
		t.bucket = make([]float32, 0, min(total, bucketFloats))
	}
	t.bucket, t.pending = t.bucket[:0], t.pending[:0]
	for _, g := range grads {
		if len(g) > cap(t.bucket) {
			if err := t.comm.SumFloat32(g); err != nil {
				return err
			}
			continue
		}
		if len(t.bucket)+len(g) > cap(t.bucket) {
			if err := t.flushBucket(); err != nil {
				return err
			}
		}
		t.bucket, t.pending = append(t.bucket, g...), append(t.pending, g)
	}
	return t.flushBucket()
}

// flushBucket sums the bucket across the ranks and copies the sums back
// into the gradients it holds.
func (t *Trainer) flushBucket() error {
	if len(t.bucket) == 0 {
		return nil
	}
	if err := t.comm.SumFloat32(t.bucket); err != nil {
		return err
	}
	off := 0
	for _, g := range t.pending {
		off += copy(g, t.bucket[off:])
	}
	t.bucket, t.pending = t.bucket[:0], t.pending[:0]
	return nil
}

// anyRank reports whether flag is set on any rank.
func (t *Trainer) anyRank(flag bool) (bool, error) {
	v := append(t.reduce[:0], 0)
	if flag {
		v[0] = 1
	}
	t.reduce = v
	err := t.comm.SumFloat64(v)
	return v[0] > 0, err
}

// syncBuffers gives every rank rank 0's buffers after a step's
// micro-batches, as PyTorch's DistributedDataParallel does (its
// broadcast_buffers): BatchNorm's running statistics and an EMA codebook
// are updated by each rank from its own samples and would drift apart. On
// a GPU each buffer goes through the host (buffers are small: statistics
// and codebooks, not activations).
func (t *Trainer) syncBuffers() error {
	for _, b := range t.eng.buffers {
		v := b.v[t.eng.u]
		if v.OnHost() {
			if err := t.comm.Broadcast(t.eng.view(v), 0); err != nil {
				return err
			}
			continue
		}
		h, err := t.eng.train.Download(v)
		if err != nil {
			return err
		}
		err = t.comm.Broadcast(hostBytes(h), 0)
		if err == nil {
			err = t.eng.train.Copy(v, h)
		}
		h.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// buffersAgree checks at the end of a data-parallel run that every rank
// holds the same buffers, by a hash of their bytes: the checkpoints hold
// rank 0's, and a rank that trained with others would be a different
// model.
func (t *Trainer) buffersAgree() error {
	h := fnv.New64a()
	for _, b := range t.eng.buffers {
		v := b.v[t.eng.u]
		if v.OnHost() {
			h.Write(hostBytes(v))
			continue
		}
		c, err := t.eng.train.Download(v)
		if err != nil {
			return err
		}
		h.Write(hostBytes(c))
		c.Close()
	}
	// 53 bits of the hash: what a float64 holds exactly.
	i, _, _, err := t.comm.Agree([]float64{float64(h.Sum64() >> 11)})
	if err == nil && i >= 0 {
		err = fmt.Errorf("data parallel: after step %d the ranks' buffers (%s, ...) differ: the ranks trained different models (a bug: please report it)", t.state.Step, t.eng.buffers[0].name)
	}
	return err
}

#pragma once
// One look at a rendezvous store for a key another rank sets, or for an abort that a
// failing rank sets instead of going on. A rank sets its keys before it can abort, so
// the abort is read first and the key second: a key set before an abort that this look
// saw is then seen too, and a rank's answer given just before it failed (say, a job
// check that it then refused) is read as its answer, not as its failure. Read the
// other way round, the rank could set the key and abort between the two reads, and
// the look would report the abort with the answer already there.
namespace tiergen::dist {

enum class StoreLook { KeyPresent, Aborted, NeitherYet };

// `has(name)` is one read of the store for `name` (c10d: Store::check, which reads
// every record written so far).
template <typename Has>
StoreLook look_for_key(Has&& has, const char* key, const char* abort_key) {
  const bool aborted = has(abort_key);
  if (has(key)) return StoreLook::KeyPresent;
  return aborted ? StoreLook::Aborted : StoreLook::NeitherYet;
}

}  // namespace tiergen::dist

//! The series one endpoint and one admitted label tuple observe into,
//! each found once for the life of the process rather than once per
//! request.
//!
//! A request observes into some 25 series when it reaches a milestone and
//! when it ends (its TTFT, each phase, TPOT, the gaps, the tokens, its
//! duration). Found one by one, each was a hash of its label values, a read
//! lock and a comparison, about 350 instructions: together about a tenth
//! of what a short stream costs the proxy per request. Families live for
//! the whole process, series are never removed, and the label tuples are
//! capped ([`super::labels`]), so the handles of one (endpoint, tuple) stay
//! valid forever: a [`Bundle`] keeps them, and a request finds its bundle
//! with one lookup. Each handle is still made on its first use, so a series
//! appears in the exposition only once something was observed into it, as
//! before.
//!
//! The families whose closed labels are open-ended or come from the config
//! (`requests_total`'s status codes, the SLOs, the workload ranges) are
//! still found per request, with [`Bundle::with`].

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock, RwLock},
};

use foldhash::fast::RandomState;

use super::{
    counter::Plain,
    families::Families,
    family::{Family, Handle, Kind},
    histogram::{Buckets, HistogramFamily},
};
use crate::{
    config::Disabled,
    measure::{
        dialect::{Dialect, ServerTimings},
        timeline::{Outcome, Phase},
    },
};

/// The histograms labelled by endpoint alone (and the free labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ByEndpoint {
    Ttft,
    Ttfo,
    Itl,
    InterEvent,
    Tpot,
    EventTokens,
    InputTokens,
    CachedInputTokens,
    OutputTokens,
    ReasoningTokens,
}

impl ByEndpoint {
    const COUNT: usize = 10;

    fn family(self, f: &Families) -> Option<&HistogramFamily> {
        match self {
            Self::Ttft => f.ttft.as_ref(),
            Self::Ttfo => f.ttfo.as_ref(),
            Self::Itl => f.itl.as_ref(),
            Self::InterEvent => f.inter_event.as_ref(),
            Self::Tpot => f.tpot.as_ref(),
            Self::EventTokens => f.event_tokens.as_ref(),
            Self::InputTokens => f.input_tokens.as_ref(),
            Self::CachedInputTokens => f.cached_input_tokens.as_ref(),
            Self::OutputTokens => f.output_tokens.as_ref(),
            Self::ReasoningTokens => f.reasoning_tokens.as_ref(),
        }
    }
}

/// `output_tokens_total`'s `kind`: the answer, or reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenKind {
    Output,
    Reasoning,
}

impl TokenKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Output => "output",
            Self::Reasoning => "reasoning",
        }
    }
}

/// One series, found on first use; `None` when its family (or, for a
/// phase, the phase) is disabled, which is fixed at start like the
/// families.
struct Slot<K: Kind>(OnceLock<Option<Handle<K>>>);

impl<K: Kind> Default for Slot<K> {
    fn default() -> Self {
        Self(OnceLock::new())
    }
}

impl<K: Kind> Slot<K> {
    fn get(&self, make: impl FnOnce() -> Option<Handle<K>>) -> Option<&Handle<K>> {
        self.0.get_or_init(make).as_ref()
    }
}

/// The series of one endpoint and one admitted tuple of free label values.
pub(super) struct Bundle {
    endpoint: &'static str,
    free: Arc<[String]>,
    by_endpoint: [Slot<Buckets>; ByEndpoint::COUNT],
    phase: [Slot<Buckets>; Phase::ALL.len()],
    server_phase: [Slot<Buckets>; ServerTimings::PHASES.len()],
    duration: [Slot<Buckets>; Outcome::ALL.len()],
    input_tokens_total: Slot<Plain>,
    output_tokens_total: [Slot<Plain>; 2],
}

impl Bundle {
    fn new(dialect: Dialect, free: Arc<[String]>) -> Self {
        Self {
            endpoint: dialect.as_str(),
            free,
            by_endpoint: Default::default(),
            phase: Default::default(),
            server_phase: Default::default(),
            duration: Default::default(),
            input_tokens_total: Slot::default(),
            output_tokens_total: Default::default(),
        }
    }

    /// The `endpoint` label value.
    pub(super) fn endpoint(&self) -> &'static str {
        self.endpoint
    }

    /// A series' label values: `closed`, then the free ones.
    pub(super) fn with<'b>(&'b self, closed: &[&'b str]) -> Tuple<'b> {
        Tuple::new(closed, &self.free)
    }

    fn find<K: Kind>(&self, family: Option<&Family<K>>, closed: &[&str]) -> Option<Handle<K>> {
        family.map(|family| family.with_label_values(&self.with(closed)))
    }

    /// The series of `which`, unless its family is disabled.
    pub(super) fn histogram(&self, f: &Families, which: ByEndpoint) -> Option<&Handle<Buckets>> {
        self.by_endpoint[which as usize].get(|| self.find(which.family(f), &[self.endpoint]))
    }

    /// The `phase_seconds` series of `phase`, unless it is disabled.
    pub(super) fn phase(
        &self,
        f: &Families,
        off: &Disabled,
        phase: Phase,
    ) -> Option<&Handle<Buckets>> {
        self.phase[phase as usize].get(|| {
            let name = phase.as_str();
            let family = f
                .phase
                .as_ref()
                .filter(|_| !off.phase("phase_seconds", name));
            self.find(family, &[self.endpoint, name])
        })
    }

    /// The `server_phase_seconds` series of the `i`th of
    /// [`ServerTimings::PHASES`], unless it is disabled.
    pub(super) fn server_phase(
        &self,
        f: &Families,
        off: &Disabled,
        i: usize,
    ) -> Option<&Handle<Buckets>> {
        let (slot, name) = (self.server_phase.get(i)?, ServerTimings::PHASES[i]);
        slot.get(|| {
            let family =
                (f.server_phase.as_ref()).filter(|_| !off.phase("server_phase_seconds", name));
            self.find(family, &[self.endpoint, name])
        })
    }

    /// The `request_duration_seconds` series of `outcome`.
    pub(super) fn duration(&self, f: &Families, outcome: Outcome) -> Option<&Handle<Buckets>> {
        self.duration[outcome as usize]
            .get(|| self.find(f.duration.as_ref(), &[self.endpoint, outcome.as_str()]))
    }

    /// The `input_tokens_total` series.
    pub(super) fn input_tokens_total(&self, f: &Families) -> Option<&Handle<Plain>> {
        (self.input_tokens_total).get(|| self.find(Some(&f.input_tokens_total), &[self.endpoint]))
    }

    /// The `output_tokens_total` series of `kind`.
    pub(super) fn output_tokens_total(
        &self,
        f: &Families,
        kind: TokenKind,
    ) -> Option<&Handle<Plain>> {
        self.output_tokens_total[kind as usize].get(|| {
            self.find(
                Some(&f.output_tokens_total),
                &[self.endpoint, kind.as_str()],
            )
        })
    }
}

/// The bundles made so far, by admitted tuple, then endpoint; as bounded as
/// the tuples are (a bundle holds 30 handles, about half a kilobyte,
/// against the kilobytes of the series they point to).
#[derive(Default)]
pub(super) struct Bundles {
    by_tuple: RwLock<HashMap<Arc<[String]>, Row, RandomState>>,
}

/// One tuple's bundles, indexed by [`Dialect::index`].
type Row = Box<[OnceLock<Arc<Bundle>>]>;

impl Bundles {
    /// The bundle of `dialect` and `free` (an admitted tuple), made on
    /// first use.
    pub(super) fn get(&self, dialect: Dialect, free: &Arc<[String]>) -> Arc<Bundle> {
        let i = dialect.index();
        let make = || Arc::new(Bundle::new(dialect, free.clone()));
        // A poisoned lock still holds a consistent map: every write below
        // is a whole insert.
        let read = self.by_tuple.read().unwrap_or_else(|e| e.into_inner());
        if let Some(row) = read.get(&**free) {
            // A dialect missing from `Dialect::ALL` has no slot: it gets a
            // bundle of its own each time, whose series are the same.
            return row
                .get(i)
                .map_or_else(make, |slot| slot.get_or_init(make).clone());
        }
        drop(read);
        let mut write = self.by_tuple.write().unwrap_or_else(|e| e.into_inner());
        let row = write
            .entry(free.clone())
            .or_insert_with(|| Dialect::ALL.iter().map(|_| OnceLock::new()).collect());
        row.get(i)
            .map_or_else(make, |slot| slot.get_or_init(make).clone())
    }
}

/// Label values a series is found by held inline: a `Vec` for each lookup
/// was about a tenth of what the metrics cost a request (four closed
/// labels, the model and a few `[[labels]]`).
const INLINE: usize = 8;

/// One series' label values, closed then free: inline up to [`INLINE`].
pub(super) enum Tuple<'a> {
    Inline([&'a str; INLINE], usize),
    Heap(Vec<&'a str>),
}

impl<'a> Tuple<'a> {
    pub(super) fn new(closed: &[&'a str], free: &'a [String]) -> Self {
        let values = closed
            .iter()
            .copied()
            .chain(free.iter().map(String::as_str));
        let len = closed.len() + free.len();
        if len > INLINE {
            return Tuple::Heap(values.collect());
        }
        let mut inline = [""; INLINE];
        for (slot, value) in inline.iter_mut().zip(values) {
            *slot = value;
        }
        Tuple::Inline(inline, len)
    }
}

impl<'a> std::ops::Deref for Tuple<'a> {
    type Target = [&'a str];

    fn deref(&self) -> &[&'a str] {
        match self {
            Tuple::Inline(values, len) => &values[..*len],
            Tuple::Heap(values) => values,
        }
    }
}

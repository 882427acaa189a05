//! A cache instance's state, in one home: [`inner::Inner`] holds the
//! tiers, the settings, the in-process flight table, the known tag versions
//! and the counters; the backplane's messages change it here.

pub(crate) mod backplane;
pub(crate) mod flight;
pub(crate) mod inner;
mod recent;
mod versions;

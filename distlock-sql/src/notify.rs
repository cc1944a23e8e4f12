//! PostgreSQL release notifications: ONE `LISTEN` connection per database and channel, shared
//! by every client of the process on one runtime ([`Wakeups::shared`]) and fanned out to the
//! waiters of each lock name: a release's notification reaches a process once, not once per
//! client. Started on the first wait; stopped when the last client sharing it is dropped.
//!
//! A release's payload names the head of the name's queue across processes (`<member>/<name>`,
//! the member empty when nobody is queued; `statements/postgres.rs`), so only that waiter
//! tries at once: every waiting process trying after every release cost ~13 statements per
//! handoff with 8 processes, of which one could win.
//!
//! And only the head's process hears it: a member made by [`Wakeups::member`] starts with the
//! listener's tag (16 hex digits, then the 32 of the acquisition's own token), and a release
//! whose head has such a member notifies `distlock_w_<tag>`, which only that listener listens
//! on, instead of the table's channel, which every waiting process listens on (8 processes
//! each woke for every release, to find it named another). The table's channel still carries
//! "nobody queued".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use distlock_core::backend::{owner_token, PerRuntime, Share};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

type Waiters = Arc<Mutex<HashMap<String, (Arc<Signal>, usize)>>>;

/// One name's wake-up: the waiters' notify, the queue head the last release named and the
/// last grant (the member a release handed the lock to, and its token).
#[derive(Debug, Default)]
pub(crate) struct Signal {
    notify: Notify,
    head: Mutex<String>,
    grant: Mutex<Grants>,
}

/// The last grant of a name not yet taken, and the highest token granted so far (a grant
/// heard twice — handed over by a releaser of this process, then by the listener — is older
/// than a later one and does not replace it).
#[derive(Debug, Default)]
struct Grants {
    last: Option<Grant>,
    highest: u64,
}

/// A lock handed to `member` with `token`; `since`, when the releaser was of this process
/// and granted it as the next in line without a place ([`Wakeups::deliver`]): a moment
/// before the release was sent (the grant's lease counts from later).
#[derive(Debug)]
struct Grant {
    member: String,
    token: u64,
    since: Option<Instant>,
}

impl Signal {
    /// Completes at the next release notification of the name (see [`Notify::notified`]).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Whether the last release named another waiter than `member` as the queue's head (then
    /// `member` is not next and need not look).
    pub(crate) fn for_other(&self, member: &str) -> bool {
        let head = self.head.lock().unwrap_or_else(|p| p.into_inner());
        !head.is_empty() && *head != member
    }

    /// The token of the lock a release handed to `member` (`statements/postgres.rs`), if the
    /// last grant of the name was to it; taken once. A grant stays here until its member takes
    /// it or a later grant of the name replaces it (a member is one acquisition's, so a grant
    /// left by a waiter that went away is never taken; the row it names lapses with the
    /// waiter's place, or the waiter's departure gives it back).
    /// With the token, the moment the grant's lease counts from when the grant came without
    /// a place (see [`Grant`]); `None` there for a grant to a place, whose lease is the rest of
    /// the place.
    pub(crate) fn take_grant(&self, member: &str) -> Option<(u64, Option<Instant>)> {
        let mut grants = self.grant.lock().unwrap_or_else(|p| p.into_inner());
        match grants.last.as_ref() {
            Some(g) if g.member == member => grants.last.take().map(|g| (g.token, g.since)),
            _ => None,
        }
    }

    fn wake(&self, release: &Release<'_>, since: Option<Instant>) {
        release
            .head
            .clone_into(&mut self.head.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(token) = release.grant {
            let mut grants = self.grant.lock().unwrap_or_else(|p| p.into_inner());
            if token > grants.highest {
                grants.highest = token;
                grants.last = Some(Grant {
                    member: release.head.to_owned(),
                    token,
                    since,
                });
            }
        }
        self.notify.notify_waiters();
    }
}

/// What a release notification says.
#[derive(Debug, PartialEq, Eq)]
struct Release<'a> {
    /// The queue head named (empty: any).
    head: &'a str,
    /// The token of the lock handed to `head`, when the release granted it.
    grant: Option<u64>,
    /// The lock's name.
    name: &'a str,
}

/// Reads a release payload: `<head>/<name>` (the head a member made by [`Wakeups::member`], or
/// empty when nobody is queued), or `<head>=<token>/<name>` for a grant; `None` for anything
/// else (no client of ours sends it).
#[cfg(any(feature = "postgres", test))]
fn parse(payload: &str) -> Option<Release<'_>> {
    let (head, name) = payload.split_once('/')?;
    let (head, grant) = match head.split_once(GRANT_MARK) {
        Some((member, token)) => (member, Some(token.parse::<u64>().ok().filter(|&t| t > 0)?)),
        None => (head, None),
    };
    ((head.is_empty() && grant.is_none()) || grantable(head)).then_some(Release {
        head,
        grant,
        name,
    })
}

fn hex(h: &str) -> bool {
    h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `member` was made by [`Wakeups::member`]: a release may grant it the lock.
pub(crate) fn grantable(member: &str) -> bool {
    member.len() == GRANTABLE_MEMBER
        && member.ends_with(GRANTABLE_MARK)
        && hex(&member[..TAGGED_MEMBER])
}

/// Between a granted member and its token in a release payload.
pub(crate) const GRANT_MARK: &str = "=";

/// How many hex digits a listener's tag has (the start of its waiters' members).
pub(crate) const TAG_LEN: usize = 16;

/// How long a member made by [`Wakeups::member`] is: the tag ([`TAG_LEN`]) and a token's 32
/// (`statements/postgres.rs` tells a tagged member by this length).
pub(crate) const TAGGED_MEMBER: usize = TAG_LEN + 32;

/// The last character of a member made by [`Wakeups::member`] (`statements/postgres.rs` tells
/// a member from the empty head by its length).
pub(crate) const GRANTABLE_MARK: char = 'g';

/// How long a member made by [`Wakeups::member`] is: the tag, a token, [`GRANTABLE_MARK`].
pub(crate) const GRANTABLE_MEMBER: usize = TAGGED_MEMBER + 1;

/// The start of the channel that only one listener listens on: its tag follows.
pub(crate) const TAGGED_CHANNEL: &str = "distlock_w_";

/// The channel that only the listener tagged `tag` listens on.
#[cfg(feature = "postgres")]
pub(crate) fn tagged_channel(tag: &str) -> String {
    format!("{TAGGED_CHANNEL}{tag}")
}

/// Wake-ups by lock name.
#[derive(Debug)]
pub(crate) struct Wakeups {
    waiters: Waiters,
    /// By lock name: the member of this process's waiter that stands next
    /// ([`Wakeups::stand_next`]).
    next: Mutex<HashMap<String, String>>,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// 16 random hex digits naming this listener's own channel ([`tagged_channel`]).
    tag: String,
}

impl Default for Wakeups {
    fn default() -> Self {
        Wakeups {
            waiters: Waiters::default(),
            next: Mutex::default(),
            listener: Mutex::default(),
            tag: owner_token()[..TAG_LEN].to_owned(),
        }
    }
}

/// A waiter's registration; deregisters on drop.
pub(crate) struct Registration {
    waiters: Waiters,
    name: String,
    pub signal: Arc<Signal>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, count)) = w.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                w.remove(&self.name);
            }
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        if let Some(h) = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            h.abort();
        }
    }
}

/// The wake-ups in use in this process, by database URL and channel.
static IN_USE: PerRuntime<Wakeups> = PerRuntime::new();

impl Wakeups {
    /// The wake-ups every client of this process shares for `channel` of the database at `url`
    /// on the current runtime, held by the client's `share` ([`Share`]: the listener runs on
    /// the runtime of the clients that use it; outside a runtime, wake-ups of its own).
    pub(crate) fn shared(share: &Share<Wakeups>, url: &str, channel: &str) -> Arc<Wakeups> {
        share.get(&IN_USE, &format!("{channel} {url}"), Wakeups::default)
    }

    /// A queue member for one acquisition whose release notifications come to this listener
    /// alone: the tag, then a fresh token ([`TAGGED_MEMBER`] hex digits), then
    /// [`GRANTABLE_MARK`].
    pub(crate) fn member(&self) -> String {
        format!("{}{}{GRANTABLE_MARK}", self.tag, owner_token())
    }

    /// Hands a grant that a release by a client of this process made to `member` (its token
    /// `token`) straight to the member's waiter when that waiter is one of this listener's
    /// (the member carries its tag): the waiter need not wait for the notification's trip
    /// through the database and the listener connection. A grant to a place is notified too,
    /// which repeats it harmlessly (an older token than the name's highest is ignored).
    ///
    /// `next_since`: the grant went to the member as this process's next in line without a
    /// place ([`Self::stand_next`]; not notified), and the release was sent after this
    /// moment. Such a grant is handed over only while the member still stands next: `false`
    /// when it stepped out, and the caller gives the lock back (see [`Self::step_out`]).
    pub(crate) fn deliver(
        &self,
        name: &str,
        member: &str,
        token: u64,
        next_since: Option<Instant>,
    ) -> bool {
        if !grantable(member) || !member.starts_with(self.tag.as_str()) {
            return true;
        }
        let next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        if next_since.is_some() && next.get(name).is_none_or(|m| m != member) {
            return false;
        }
        if let Some(signal) = self.signal(name) {
            signal.wake(
                &Release {
                    head: member,
                    grant: Some(token),
                    name,
                },
                next_since,
            );
        }
        true
    }

    /// This process's waiter for `name` that talks to the database now (the head of the
    /// in-process queue), as a release of this process may grant it the lock when no place
    /// is queued (`statements/postgres.rs`): it holds the lock then without a statement of
    /// its own. It stands next until [`Self::step_out`].
    pub(crate) fn stand_next(&self, name: &str, member: &str) {
        self.next
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), member.to_owned());
    }

    /// The member standing next for `name`, if any ([`Self::stand_next`]).
    pub(crate) fn next_of(&self, name: &str) -> Option<String> {
        self.next
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// `member` no longer stands next for `name` (its acquisition ended); the token of a
    /// grant handed to it and not taken, which the caller gives back. Under the same lock as
    /// [`Self::deliver`]'s check, so a grant to the next in line is either handed over before
    /// (and found here) or refused after (and given back by the releaser).
    pub(crate) fn step_out(&self, name: &str, member: &str) -> Option<u64> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        if next.get(name).is_some_and(|m| m == member) {
            next.remove(name);
        }
        self.signal(name)
            .and_then(|s| s.take_grant(member))
            .map(|(token, _)| token)
    }

    fn signal(&self, name: &str) -> Option<Arc<Signal>> {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|(s, _)| Arc::clone(s))
    }

    /// Registers interest in `name`'s release.
    pub(crate) fn register(&self, name: &str) -> Registration {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let entry = w
            .entry(name.to_owned())
            .or_insert_with(|| (Arc::new(Signal::default()), 0));
        entry.1 += 1;
        Registration {
            waiters: Arc::clone(&self.waiters),
            name: name.to_owned(),
            signal: Arc::clone(&entry.0),
        }
    }

    /// Starts the shared listener on `channel` once (PostgreSQL; without the `postgres`
    /// feature there is no PostgreSQL client to listen for). `label` names the backend in logs;
    /// the URL, which may hold a password, never appears in them.
    #[cfg(not(feature = "postgres"))]
    pub(crate) fn ensure_listener(&self, _url: &str, _channel: &str, _label: &str) {}

    /// Starts the shared listener on `channel` once (PostgreSQL). `label` names the backend in
    /// logs; the URL, which may hold a password, never appears in them.
    #[cfg(feature = "postgres")]
    pub(crate) fn ensure_listener(&self, url: &str, channel: &str, label: &str) {
        let mut slot = self.listener.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (url, channels, label, waiters) = (
            url.to_owned(),
            [channel.to_owned(), tagged_channel(&self.tag)],
            label.to_owned(),
            Arc::clone(&self.waiters),
        );
        *slot = Some(tokio::spawn(async move {
            // Bounded retry pace: a broken listener is retried once a second for as long as a
            // client shares it; waiters keep a slow safety poll meanwhile.
            loop {
                if let Err(e) = listen(&url, &channels, &waiters).await {
                    tracing::warn!(
                        backend = %label,
                        error = %e,
                        "the LISTEN connection for release notifications failed; waiters poll \
                         every second until it is back (retrying in 1 s)"
                    );
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }));
    }
}

#[cfg(feature = "postgres")]
async fn listen(url: &str, channels: &[String], waiters: &Waiters) -> Result<(), sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect(url).await?;
    listener
        .listen_all(channels.iter().map(String::as_str))
        .await?;
    loop {
        let n = listener.recv().await?;
        let Some(release) = parse(n.payload()) else {
            continue;
        };
        let signal = waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(release.name)
            .map(|(s, _)| Arc::clone(s));
        if let Some(signal) = signal {
            signal.wake(&release, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Release};

    fn read(payload: &str) -> Option<(&str, Option<u64>, &str)> {
        let Release { head, grant, name } = parse(payload)?;
        Some((head, grant, name))
    }

    #[test]
    fn payloads_name_the_head_and_the_lock() {
        let m = "fedcba98765432100123456789abcdef0123456789abcdefg";
        assert_eq!(read(&format!("{m}/a/b")), Some((m, None, "a/b")));
        assert_eq!(read("/a/b"), Some(("", None, "a/b")));
        // No client of ours sends a bare name, or names a head it did not make.
        assert_eq!(read("plain"), None);
        assert_eq!(read("0123456789abcdef0123456789abcdef/a"), None);
    }

    #[test]
    fn a_grant_names_its_member_and_token() {
        let tagged = "fedcba98765432100123456789abcdef0123456789abcdefg";
        assert_eq!(
            read(&format!("{tagged}=42/jobs/nightly")),
            Some((tagged, Some(42), "jobs/nightly"))
        );
        assert_eq!(read(&format!("{tagged}/a")), Some((tagged, None, "a")));
        // Only a member made by `Wakeups::member` with a positive token is a grant; anything
        // else is refused.
        for odd in [
            format!("{tagged}=0/a"),
            format!("{tagged}=x/a"),
            format!("{tagged}=/a"),
            format!("{}=7/a", &tagged[..48]),
            "0123456789abcdef0123456789abcdef=7/a".to_owned(),
            "=7/a".to_owned(),
        ] {
            assert_eq!(read(&odd), None, "{odd}");
        }
    }

    #[test]
    fn a_grant_is_taken_once_and_only_by_its_member() {
        let signal = super::Signal::default();
        let (a, b) = (format!("{:048}g", 1), format!("{:048}g", 2));
        let grant = |head: &str, token: Option<u64>| {
            signal.wake(
                &Release {
                    head,
                    grant: token,
                    name: "n",
                },
                None,
            )
        };
        grant(&a, Some(9));
        assert!(signal.for_other(&b));
        assert_eq!(signal.take_grant(&b), None);
        assert_eq!(signal.take_grant(&a), Some((9, None)));
        assert_eq!(signal.take_grant(&a), None);
        // A plain wake-up does not drop a grant not yet taken.
        grant(&a, Some(10));
        grant("", None);
        assert_eq!(signal.take_grant(&a), Some((10, None)));
        // A grant heard again after a later one (its notification, after the releaser of
        // this process handed it over) does not replace the later one.
        grant(&b, Some(11));
        grant(&a, Some(10));
        assert_eq!(signal.take_grant(&a), None);
        assert_eq!(signal.take_grant(&b), Some((11, None)));
    }

    /// A grant to the next in line without a place is handed over while it stands next, and
    /// found (to be given back) when it steps out before taking it; refused once it stepped
    /// out (the releaser gives it back).
    #[test]
    fn a_grant_to_the_next_in_line_is_handed_over_or_refused_once() {
        let wakeups = super::Wakeups::default();
        let member = wakeups.member();
        assert!(super::grantable(&member), "{member}");
        let _registration = wakeups.register("n");
        let since = Some(tokio::time::Instant::now());
        // Not standing next: refused.
        assert!(!wakeups.deliver("n", &member, 5, since));
        wakeups.stand_next("n", &member);
        assert_eq!(wakeups.next_of("n").as_deref(), Some(member.as_str()));
        assert!(wakeups.deliver("n", &member, 6, since));
        // Stepping out before taking it: the grant is found, for the caller to give back.
        assert_eq!(wakeups.step_out("n", &member), Some(6));
        assert_eq!(wakeups.next_of("n"), None);
        assert!(!wakeups.deliver("n", &member, 7, since));
        assert_eq!(wakeups.step_out("n", &member), None);
        // A member of another listener is none of this one's business.
        let other = super::Wakeups::default().member();
        assert!(wakeups.deliver("n", &other, 8, since));
    }
}

use super::*;

const MS: u64 = 1_000_000;

fn pair(src: &str) -> EventSpec {
    clarion_lang::check(src).expect("checks").remove(0)
}

const PAIR: &str = "event lossy_web
  filter dst_port = 80
  filter dst_ip in 10.0.0.0/8 and proto = udp
  when sum(volume) > 10KB
  per 5tuple
  every 10ms
  then install heavy_to_dst on dst_ip/24, dst_port for 100ms

event heavy_to_dst
  filter dst_ip in 10.0.128.0/20
  filter src_ip in 192.168.0.0/16
  when sum(volume) > 1KB
  per (src_ip, dst_ip)
  every 20ms
  on demand
";

fn group(dst: [u8; 4], port: Option<u16>) -> GroupKey {
    GroupKey {
        src_ip: Some((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 32)),
        dst_ip: Some((IpAddr::V4(Ipv4Addr::from(dst)), 32)),
        src_port: Some(Some(5000)),
        dst_port: Some(port),
        proto: Some(6),
        vlan: Some(None),
        vni: None,
    }
}

fn window(start_ms: u64) -> Window {
    Window {
        start_ns: start_ms * MS,
        end_ns: (start_ms + 10) * MS,
    }
}

#[test]
fn an_instance_narrows_every_filter_and_starts_when_the_decision_is_due() {
    let spec = pair(PAIR);
    let d = &spec.drill_downs[0];
    let i = instance(
        d,
        spec.interval_ns,
        window(20),
        &group([10, 0, 128, 7], Some(80)),
        31 * MS,
    )
    .expect("instance");
    assert_eq!(i.spec.name, "heavy_to_dst[dst_ip=10.0.128.0/24,dst_port=80]");
    // Window [20, 30) ms, decision due at 40 ms: heavy_to_dst's 20 ms grid gives 40 ms.
    assert_eq!((i.start_ns, i.end_ns), (40 * MS, Some(140 * MS)));
    // The first filter keeps its /20 narrowed to the /24; the second
    // gains both conditions.
    assert_eq!(i.spec.filters.len(), 2);
    let f = &i.spec.filters[0];
    assert_eq!(
        f.dst_ip.map(|p| (p.addr.to_string(), p.len)),
        Some(("10.0.128.0".into(), 24))
    );
    assert_eq!(f.dst_port, Some(PortRange { lo: 80, hi: 80 }));
    assert!(f.src_ip.is_none());
    let f = &i.spec.filters[1];
    assert!(f.src_ip.is_some() && f.dst_ip.is_some());
    assert!(!i.spec.on_demand && i.spec.drill_downs.is_empty());
    // A window ending off heavy_to_dst's grid: [30, 40) ms is due at 50 ms, starts at 60.
    let i = instance(
        d,
        spec.interval_ns,
        window(30),
        &group([10, 0, 128, 7], Some(80)),
        40 * MS,
    )
    .expect("instance");
    assert_eq!(i.start_ns, 60 * MS);
    // Decided after a gap, at 75 ms: due at 80 ms, the end of lossy_web's window then.
    let i = instance(
        d,
        spec.interval_ns,
        window(30),
        &group([10, 0, 128, 7], Some(80)),
        75 * MS,
    )
    .expect("instance");
    assert_eq!(i.start_ns, 80 * MS);
}

#[test]
fn narrowings_that_match_nothing_or_lack_a_value_install_nothing() {
    let spec = pair(PAIR);
    let d = &spec.drill_downs[0];
    // Outside heavy_to_dst's /20 the first filter drops; the second stays.
    let i = instance(
        d,
        spec.interval_ns,
        window(0),
        &group([10, 0, 200, 1], Some(80)),
        0,
    )
    .expect("one filter left");
    assert_eq!(i.spec.filters.len(), 1);
    // An ICMP group has no port to narrow on.
    assert!(instance(d, spec.interval_ns, window(0), &group([10, 0, 128, 7], None), 0).is_none());
    // IPv6 never matches an IPv4 prefix: both filters drop.
    let mut g = group([0; 4], Some(80));
    g.dst_ip = Some(("2001:db8::1".parse().expect("v6"), 128));
    let only_v4 = pair(&PAIR.replace("  filter src_ip in 192.168.0.0/16\n", ""));
    assert!(instance(&only_v4.drill_downs[0], spec.interval_ns, window(0), &g, 0).is_none());
}

#[test]
fn without_on_or_for_the_instance_is_the_event_until_removed() {
    let spec = pair(&PAIR.replace(" on dst_ip/24, dst_port for 100ms", ""));
    let i = instance(
        &spec.drill_downs[0],
        spec.interval_ns,
        window(0),
        &group([1, 2, 3, 4], None),
        0,
    )
    .expect("instance");
    assert_eq!(i.spec.name, "heavy_to_dst");
    assert_eq!(i.end_ns, None);
    assert_eq!(i.spec.filters, spec.drill_downs[0].event.filters);
}

fn inst(name: &str, start_ms: u64, end_ms: Option<u64>) -> Instance {
    let mut spec = pair(PAIR).drill_downs[0].event.as_ref().clone();
    spec.name = name.into();
    Instance {
        spec,
        start_ns: start_ms * MS,
        end_ns: end_ms.map(|e| e * MS),
    }
}

#[test]
fn the_book_extends_reaching_instances_and_installs_the_others() {
    let mut book: Book<u32> = Book::default();
    let Action::Install(i) = book.fired(inst("a", 40, Some(140))) else {
        panic!("installs")
    };
    book.installed(&i.spec.name, 7, i.end_ns);
    // Starts before the end: extended.
    assert_eq!(
        book.fired(inst("a", 60, Some(160))),
        Action::Extend {
            handle: 7,
            end_ns: Some(160 * MS)
        }
    );
    // Inside the span already: nothing.
    assert_eq!(book.fired(inst("a", 80, Some(150))), Action::Nothing);
    // Starts exactly at the end: the spans touch, extended.
    assert!(matches!(
        book.fired(inst("a", 160, Some(200))),
        Action::Extend { .. }
    ));
    // After a gap: a second instance, beside the first.
    let Action::Install(i) = book.fired(inst("a", 300, Some(400))) else {
        panic!("installs")
    };
    book.installed(&i.spec.name, 8, i.end_ns);
    assert_eq!(book.len(), 2);
    // Another name is another instance; "until removed" is never extended further.
    let Action::Install(_) = book.fired(inst("b", 40, None)) else {
        panic!("installs")
    };
    book.installed("b", 9, None);
    assert_eq!(book.fired(inst("b", 500, Some(600))), Action::Nothing);
    assert_eq!(book.expired(199 * MS), Vec::<u32>::new());
    assert_eq!(book.expired(200 * MS), vec![7]);
    assert_eq!(book.expired(u64::MAX), vec![8]);
    book.forget(9);
    assert!(book.is_empty());
}

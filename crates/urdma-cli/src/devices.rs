//! `urdma devices`: the devices this process sees, printed like ibv_devinfo,
//! with the NIC that serves each (the agent and the processes attached).

use anyhow::Result;
use clap::Args;
use urdma::config::discover_for_programs;
use urdma::{DeviceAttr, DeviceConfig, Gid};
use urdma_nic::fabric::stats::{read_all, Published};

/// Arguments of `urdma devices`.
#[derive(Args)]
pub struct DevicesArgs {
    /// Print every attribute (as `ibv_devinfo -v`).
    #[arg(short, long)]
    verbose: bool,
    /// Only this device.
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// The attributes a device on `cfg` reports (without opening it).
fn attributes(cfg: &DeviceConfig) -> DeviceAttr {
    urdma::api::device_attr_for(cfg)
}

/// Who runs the NIC of the device on `cfg`, from what the running NICs of
/// this network namespace publish (the same records `urdma stat` reads).
fn nic_state(cfg: &DeviceConfig, published: &[Published]) -> String {
    let addr = std::net::SocketAddr::new(cfg.addr, cfg.port).to_string();
    let here = urdma_nic::fabric::stats::own_netns();
    let Some(p) = published
        .iter()
        .find(|p| p.live && p.stats.addr == addr && p.stats.netns.is_none_or(|n| Some(n) == here))
    else {
        return "not running (the NIC agent starts when a program opens the device)".into();
    };
    let pid = p.stats.pid;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let is_agent = cmdline.split(|b| *b == 0).any(|a| a == b"agent");
    if !is_agent {
        return format!("inside process {pid} (URDMA_NIC=embedded)");
    }
    let users: Vec<String> = p
        .stats
        .processes
        .iter()
        .map(|u| u.pid.to_string())
        .collect();
    match users.len() {
        0 => format!("NIC agent pid {pid}, no process attached"),
        n => format!(
            "NIC agent pid {pid}, {n} process{} attached (pid {})",
            if n == 1 { "" } else { "es" },
            users.join(", ")
        ),
    }
}

fn print_device(cfg: &DeviceConfig, verbose: bool, published: &[Published]) {
    let a = attributes(cfg);
    println!("hca_id:\t{}", cfg.name);
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!("\tfw_ver:\t\t\t\t{}", a.fw_ver);
    println!("\tnode_guid:\t\t\t{}", guid(a.node_guid));
    println!("\tsys_image_guid:\t\t\t{}", guid(a.sys_image_guid));
    println!("\tvendor_id:\t\t\t{:#x}", a.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    println!("\thw_ver:\t\t\t\t{:#x}", a.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    println!("\tnic:\t\t\t\t{}", nic_state(cfg, published));
    if verbose {
        println!("\tmax_mr_size:\t\t\t{:#x}", a.max_mr_size);
        println!("\tpage_size_cap:\t\t\t{:#x}", a.page_size_cap);
        println!("\tmax_qp:\t\t\t\t{}", a.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
        println!("\tmax_sge:\t\t\t{}", a.max_sge);
        println!("\tmax_cq:\t\t\t\t{}", a.max_cq);
        println!("\tmax_cqe:\t\t\t{}", a.max_cqe);
        println!("\tmax_mr:\t\t\t\t{}", a.max_mr);
        println!("\tmax_pd:\t\t\t\t{}", a.max_pd);
        println!("\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom);
        println!("\tatomic_cap:\t\t\tATOMIC_HCA (1)");
        println!("\tmax_inline_data:\t\t{}", a.max_inline_data);
    }
    println!("\t\tport:\t1");
    println!("\t\t\tstate:\t\t\tPORT_ACTIVE (4)");
    println!("\t\t\tmax_mtu:\t\t4096 (5)");
    // The interface's MTU sets the port's, as the device has it when it
    // opens (a 1500-byte link: 1024).
    println!(
        "\t\t\tactive_mtu:\t\t{} ({})",
        a.port_mtu.bytes(),
        a.port_mtu as u8
    );
    println!("\t\t\tsm_lid:\t\t\t0");
    println!("\t\t\tport_lid:\t\t0");
    println!("\t\t\tport_lmc:\t\t0x00");
    println!("\t\t\tlink_layer:\t\tEthernet");
    if verbose {
        println!("\t\t\tmax_msg_sz:\t\t0x80000000");
        println!("\t\t\tgid_tbl_len:\t\t{}", urdma::GID_TABLE_LEN);
        println!("\t\t\tpkey_tbl_len:\t\t1");
        println!("\t\t\tphys_state:\t\tLINK_UP (5)");
        println!("\t\t\tudp_port:\t\t{}", cfg.port);
        println!("\t\t\tGID[  0]:\t\t{}, RoCE v2", Gid::from_ip(cfg.addr));
    }
    println!();
}

/// Run `urdma devices`.
pub fn run(args: &DevicesArgs) -> Result<()> {
    let devs = discover_for_programs()?;
    let published = read_all();
    let mut shown = 0;
    for d in devs
        .iter()
        .filter(|d| args.device.as_ref().is_none_or(|n| *n == d.name))
    {
        print_device(d, args.verbose, &published);
        shown += 1;
    }
    if shown == 0 {
        match &args.device {
            Some(n) => anyhow::bail!("no device named {n}"),
            None => anyhow::bail!("no urdma devices (no up interface has an IPv4 address)"),
        }
    }
    Ok(())
}

-- Wireshark / tshark dissector for the testbed's MRC-style wire format (docs/wire-format.md).
--
-- Why: tshark's own InfiniBand dissector decodes the BTH of these packets and then reads the
-- MRC extension headers as an RETH and an ICRC, which they are not. This dissector takes UDP
-- port 4791 and decodes the BTH and every MRC extension (DATA, ACK/SACK, NACK, PROBE,
-- PROBE-ACK) field by field, under the names of the scapy layers in endpoint/wire.py, which are
-- the format's single definition (tests/test_wire_dissector.py checks the two agree).
--
-- Use:  tshark -X lua_script:endpoint/mrc.lua -r capture.pcap -O mrc
--       wireshark -X lua_script:endpoint/mrc.lua capture.pcap
--       (or copy it into ~/.local/lib/wireshark/plugins/)
--       `testbed capture` prints the command for its own captures.
-- Filter examples: mrc.data.ev == 49160, mrc.trimmed, mrc.nack.reason == 1, mrc.bth.psn > 100

local mrc = Proto("mrc", "MRC-style transport (mrc-testbed)")

local OPCODES = {
    [0x0A] = "RC_RDMA_WRITE_ONLY (DATA)",
    [0x11] = "RC_ACKNOWLEDGE",
    [0xC0] = "MRC_PROBE",
    [0xC1] = "MRC_PROBE_ACK",
}
local SYNDROMES = { [0x1F] = "ACK", [0x60] = "NAK" }
local NACK_REASONS = { [1] = "trimmed", [2] = "out-of-window", [3] = "sequence" }
local TRIMMED_DSCP = 11 -- contracts.dscp.TRIMMED_DSCP: what a switch re-marks a trimmed packet with

local f = {
    -- BTH (12 bytes, IBA 9.2)
    opcode = ProtoField.uint8("mrc.bth.opcode", "Opcode", base.HEX, OPCODES),
    se = ProtoField.uint8("mrc.bth.se", "Solicited event", base.DEC, nil, 0x80),
    migreq = ProtoField.uint8("mrc.bth.migreq", "MigReq", base.DEC, nil, 0x40),
    padcnt = ProtoField.uint8("mrc.bth.padcnt", "Pad count", base.DEC, nil, 0x30),
    tver = ProtoField.uint8("mrc.bth.tver", "Transport version", base.DEC, nil, 0x0F),
    pkey = ProtoField.uint16("mrc.bth.pkey", "Partition key", base.HEX),
    dqpn = ProtoField.uint24("mrc.bth.dqpn", "Destination QP", base.DEC),
    ackreq = ProtoField.uint8("mrc.bth.ackreq", "AckReq", base.DEC, nil, 0x80),
    psn = ProtoField.uint24("mrc.bth.psn", "PSN", base.DEC),
    -- DATA extension (40 bytes)
    offset = ProtoField.uint64("mrc.data.offset", "Placement offset", base.DEC),
    msg_id = ProtoField.uint32("mrc.data.msg_id", "Message id", base.DEC),
    payload_len = ProtoField.uint32("mrc.data.payload_len", "Payload length", base.DEC),
    msg_len = ProtoField.uint32("mrc.data.msg_len", "Message length", base.DEC),
    ev = ProtoField.uint16("mrc.data.ev", "EV", base.DEC),
    dflags = ProtoField.uint8("mrc.data.flags", "Flags", base.HEX),
    retx = ProtoField.bool("mrc.data.flags.retx", "Retransmit", 8, nil, 0x01),
    send_ts = ProtoField.uint64("mrc.data.send_ts", "Send timestamp (ns)", base.DEC),
    msg_crc = ProtoField.uint32("mrc.data.msg_crc", "Message CRC32", base.HEX),
    pkt_crc = ProtoField.uint32("mrc.data.pkt_crc", "Packet CRC32", base.HEX),
    payload = ProtoField.bytes("mrc.data.payload", "Payload"),
    present = ProtoField.uint32("mrc.data.present", "Payload bytes present", base.DEC),
    trimmed = ProtoField.bool("mrc.trimmed", "Trimmed by a switch"),
    -- AETH (4 bytes, IBA 9.3.5)
    syndrome = ProtoField.uint8("mrc.aeth.syndrome", "Syndrome", base.HEX, SYNDROMES),
    msn = ProtoField.uint24("mrc.aeth.msn", "MSN", base.DEC),
    -- ACK/SACK extension (32 bytes)
    coalesced = ProtoField.uint8("mrc.sack.coalesced", "Coalesced (in-order packets before the triggering one)", base.DEC),
    cum_psn = ProtoField.uint24("mrc.sack.cum_psn", "Cumulative PSN (next expected)", base.DEC),
    sack_base = ProtoField.uint24("mrc.sack.sack_base", "SACK base PSN", base.DEC),
    sack_bitmap = ProtoField.uint64("mrc.sack.sack_bitmap", "SACK bitmap", base.HEX),
    ev_echo = ProtoField.uint16("mrc.sack.ev_echo", "EV echo", base.DEC),
    ecn_echo = ProtoField.uint8("mrc.sack.ecn_echo", "ECN echo (CE packets)", base.DEC),
    sflags = ProtoField.uint8("mrc.sack.flags", "Flags", base.HEX),
    dup = ProtoField.bool("mrc.sack.flags.dup", "Duplicate", 8, nil, 0x01),
    ts_echo = ProtoField.uint64("mrc.sack.ts_echo", "Timestamp echo (ns)", base.DEC),
    ack_delay = ProtoField.uint32("mrc.sack.ack_delay", "ACK delay (ns held by the receiver)", base.DEC),
    -- NACK extension (16 bytes)
    n_cum_psn = ProtoField.uint24("mrc.nack.cum_psn", "Cumulative PSN", base.DEC),
    n_ev = ProtoField.uint16("mrc.nack.ev", "EV", base.DEC),
    reason = ProtoField.uint8("mrc.nack.reason", "Reason", base.DEC, NACK_REASONS),
    n_ts_echo = ProtoField.uint64("mrc.nack.ts_echo", "Timestamp echo (ns)", base.DEC),
    -- PROBE / PROBE-ACK extensions (16 bytes)
    p_ev = ProtoField.uint16("mrc.probe.ev", "EV", base.DEC),
    probe_seq = ProtoField.uint32("mrc.probe.seq", "Probe sequence", base.DEC),
    p_ts = ProtoField.uint64("mrc.probe.ts", "Timestamp (ns; echo in a PROBE-ACK)", base.DEC),
}
mrc.fields = f

local e_short = ProtoExpert.new("mrc.short", "Header cut short", expert.group.MALFORMED, expert.severity.ERROR)
local e_trim = ProtoExpert.new("mrc.trim", "Payload trimmed by a switch", expert.group.SEQUENCE, expert.severity.NOTE)
local e_unknown = ProtoExpert.new("mrc.unknown", "Opcode or syndrome outside the format", expert.group.MALFORMED, expert.severity.WARN)
mrc.experts = { e_short, e_trim, e_unknown }

local ip_dscp = Field.new("ip.dsfield.dscp")

local function need(tvb, tree, at, n)
    if tvb:len() < at + n then
        tree:add_proto_expert_info(e_short)
        return false
    end
    return true
end

local function dissect_data(tvb, pinfo, tree, at)
    if not need(tvb, tree, at, 40) then return "DATA (cut short)" end
    local t = tree:add(mrc, tvb(at, 40), "MRC DATA extension")
    t:add(f.offset, tvb(at, 8))
    t:add(f.msg_id, tvb(at + 8, 4))
    t:add(f.payload_len, tvb(at + 12, 4))
    t:add(f.msg_len, tvb(at + 16, 4))
    t:add(f.ev, tvb(at + 20, 2))
    local fl = t:add(f.dflags, tvb(at + 22, 1))
    fl:add(f.retx, tvb(at + 22, 1))
    t:add(f.send_ts, tvb(at + 24, 8))
    t:add(f.msg_crc, tvb(at + 32, 4))
    t:add(f.pkt_crc, tvb(at + 36, 4))
    local want = tvb(at + 12, 4):uint()
    -- On the wire (reported), not as captured: a capture with a snaplen (testbed run --pcap
    -- keeps 128 bytes) cuts the payload too, and that is no trim.
    local present = tvb:reported_len() - at - 40
    local captured = tvb:len() - at - 40
    local dscp = ip_dscp()
    local trimmed = present < want or (dscp ~= nil and dscp.value == TRIMMED_DSCP)
    tree:add(f.present, present):set_generated()
    local tr = tree:add(f.trimmed, trimmed)
    tr:set_generated()
    if trimmed then tr:add_proto_expert_info(e_trim) end
    if captured > 0 then tree:add(f.payload, tvb(at + 40, captured)) end
    local s = string.format("DATA msg=%d off=%s len=%d ev=%d", tvb(at + 8, 4):uint(),
        tostring(tvb(at, 8):uint64()), want, tvb(at + 20, 2):uint())
    if trimmed then s = s .. " [TRIMMED]" end
    return s
end

local function dissect_ack(tvb, pinfo, tree, at)
    if not need(tvb, tree, at, 4) then return "ACK (cut short)" end
    local a = tree:add(mrc, tvb(at, 4), "AETH")
    a:add(f.syndrome, tvb(at, 1))
    a:add(f.msn, tvb(at + 1, 3))
    local syn = tvb(at, 1):uint()
    at = at + 4
    if syn == 0x1F then
        if not need(tvb, tree, at, 32) then return "ACK (cut short)" end
        local t = tree:add(mrc, tvb(at, 32), "MRC ACK/SACK extension")
        t:add(f.coalesced, tvb(at, 1))
        t:add(f.cum_psn, tvb(at + 1, 3))
        t:add(f.sack_base, tvb(at + 5, 3))
        t:add(f.sack_bitmap, tvb(at + 8, 8))
        t:add(f.ev_echo, tvb(at + 16, 2))
        t:add(f.ecn_echo, tvb(at + 18, 1))
        local fl = t:add(f.sflags, tvb(at + 19, 1))
        fl:add(f.dup, tvb(at + 19, 1))
        t:add(f.ts_echo, tvb(at + 20, 8))
        t:add(f.ack_delay, tvb(at + 28, 4))
        return string.format("ACK cum=%d base=%d ev=%d ce=%d n=%d", tvb(at + 1, 3):uint(),
            tvb(at + 5, 3):uint(), tvb(at + 16, 2):uint(), tvb(at + 18, 1):uint(),
            tvb(at, 1):uint() + 1)
    elseif syn == 0x60 then
        if not need(tvb, tree, at, 16) then return "NACK (cut short)" end
        local t = tree:add(mrc, tvb(at, 16), "MRC NACK extension")
        t:add(f.n_cum_psn, tvb(at + 1, 3))
        t:add(f.n_ev, tvb(at + 4, 2))
        t:add(f.reason, tvb(at + 6, 1))
        t:add(f.n_ts_echo, tvb(at + 8, 8))
        local r = tvb(at + 6, 1):uint()
        return string.format("NACK %s ev=%d", NACK_REASONS[r] or tostring(r), tvb(at + 4, 2):uint())
    end
    tree:add_proto_expert_info(e_unknown)
    return string.format("ACKNOWLEDGE, syndrome 0x%02x", syn)
end

local function dissect_probe(tvb, pinfo, tree, at, name)
    if not need(tvb, tree, at, 16) then return name .. " (cut short)" end
    local t = tree:add(mrc, tvb(at, 16), "MRC " .. name .. " extension")
    t:add(f.p_ev, tvb(at, 2))
    t:add(f.probe_seq, tvb(at + 4, 4))
    t:add(f.p_ts, tvb(at + 8, 8))
    return string.format("%s ev=%d seq=%d", name, tvb(at, 2):uint(), tvb(at + 4, 4):uint())
end

function mrc.dissector(tvb, pinfo, tree)
    if tvb:len() < 12 then return 0 end
    pinfo.cols.protocol = "MRC"
    local root = tree:add(mrc, tvb(), "MRC-style transport")
    local b = root:add(mrc, tvb(0, 12), "Base Transport Header")
    b:add(f.opcode, tvb(0, 1))
    b:add(f.se, tvb(1, 1))
    b:add(f.migreq, tvb(1, 1))
    b:add(f.padcnt, tvb(1, 1))
    b:add(f.tver, tvb(1, 1))
    b:add(f.pkey, tvb(2, 2))
    b:add(f.dqpn, tvb(5, 3))
    b:add(f.ackreq, tvb(8, 1))
    b:add(f.psn, tvb(9, 3))
    local op = tvb(0, 1):uint()
    local info
    if op == 0x0A then
        info = dissect_data(tvb, pinfo, root, 12)
    elseif op == 0x11 then
        info = dissect_ack(tvb, pinfo, root, 12)
    elseif op == 0xC0 then
        info = dissect_probe(tvb, pinfo, root, 12, "PROBE")
    elseif op == 0xC1 then
        info = dissect_probe(tvb, pinfo, root, 12, "PROBE-ACK")
    else
        root:add_proto_expert_info(e_unknown)
        info = string.format("opcode 0x%02x", op)
    end
    pinfo.cols.info = string.format("QP %d PSN %d %s", tvb(5, 3):uint(), tvb(9, 3):uint(), info)
    return tvb:len()
end

DissectorTable.get("udp.port"):add(4791, mrc)

// [local change] prints per-flow received bytes at given simulation times
#ifndef FLOW_SAMPLER_H
#define FLOW_SAMPLER_H
#include <functional>
#include <vector>
#include <string>
#include <iostream>
#include "eventlist.h"
class FlowByteSampler : public EventSource {
public:
    FlowByteSampler(EventList& ev) : EventSource(ev, "flow_sampler"), _ix(0) {}
    void add_time(simtime_picosec t) { _times.push_back(t); }
    void start() { if (!_times.empty()) EventList::sourceIsPending(*this, _times[0]); }
    void add(std::string name, std::function<std::string()> f) { _names.push_back(name); _fns.push_back(f); }
    void doNextEvent() {
        for (size_t i = 0; i < _fns.size(); i++)
            std::cout << "FLOWBYTES t_us " << timeAsUs(EventList::now()) << " " << _names[i] << " " << _fns[i]() << std::endl;
        _ix++;
        if (_ix < _times.size()) EventList::sourceIsPending(*this, _times[_ix]);
    }
private:
    std::vector<simtime_picosec> _times;
    std::vector<std::string> _names;
    std::vector<std::function<std::string()>> _fns;
    size_t _ix;
};
#endif
